"""Policy-gradient losses of the recipes the ScaleRL paper compares: CISPO, PPO-clip (DAPO), GSPO.

One entry point, `policy_loss`, returns a scalar to MINIMISE and float stats. It is the
weighted sum of a per-token loss with the aggregation weights of `workbench.rl.aggregation`
(computed once on the full optimizer batch), so micro-batches sum to the full-batch loss.

    weights = aggregation_weights(mask, prompt_index, recipe.aggregation)
    loss, stats = policy_loss(recipe.loss, logp, gen_logp, adv, mask, weights)
    loss.backward()

Notation: logp = log pi_train(token) from the trainer's forward (carries the gradient);
gen_logp = the log-prob the GENERATOR sampled the token with, returned by the generator per
token and never recomputed (recomputed log-probs make the ratio ~1 and silently disable the
off-policy correction). A = advantage ([N] per sequence or [N, T] per token); sg = stop-gradient.

Per-token loss l_t (before weighting), with the reference log-prob b_t = gen_logp_t:
  cispo:    l_t = -sg(min(rho_t, eps_max)) * A * logp_t,  rho_t = exp(logp_t - b_t).
            Only an upper cap; the capped ratio is a weight and carries no gradient, so
            grad l_t = -min(rho_t, eps_max) * A * grad logp_t.
  ppo_clip: l_t = -min(rho_t * A, clip(rho_t, 1 - clip_low, 1 + clip_high) * A)  (DAPO when
            clip_high > clip_low).
  gspo:     s_i = exp(mean over sequence i's valid tokens of (logp_t - b_t)) (the geometric mean
            of the token ratios), and every token of sequence i gets
            l_t = -min(s_i * A, clip(s_i, 1 - gspo_clip_low, 1 + gspo_clip_high) * A).
            The gradient flows through s_i into every token: d s_i / d logp_t = s_i / len_i.
            With `sample` aggregation this is exactly the GSPO paper's sequence-level objective.

Truncated importance sampling (TIS, `cfg.tis_cap = c`): the caller also passes
old_logp = the trainer's own log-probs under the pre-update weights (no grad). Then
  - the reference above becomes b_t = old_logp_t (the policy ratio measures the trainer's own
    change: pi_train / pi_train_old), and
  - every token's loss is multiplied by tis_t = sg(min(exp(old_logp_t - gen_logp_t), c)),
    which corrects for the generator/trainer mismatch (staleness and numerics).
  So l_t(TIS) = tis_t * l_t(b = old_logp). Passing old_logp without tis_cap, or tis_cap without
  old_logp, is refused: either would silently drop the correction against the generator.

Penalties, added per token before weighting:
  KL (kl_coef > 0, needs ref_logp): k3 estimator kl_t = exp(ref_t - logp_t) - (ref_t - logp_t) - 1,
  differentiated through logp_t; l_t += kl_coef * kl_t.
  Entropy bonus (entropy_coef > 0, needs the per-token entropy with its graph): l_t -= entropy_coef * H_t.

Total: loss = sum_t weights_t * mask_t * l_t. Log-ratios are clamped to [-20, 20] before exp
(exp(20) = 4.9e8) so that one pathological token cannot overflow to inf.

Stats (python floats, mask-weighted means over valid tokens of this call): loss, pg_loss,
ratio_mean / ratio_min / ratio_max (the ratio the loss used: token rho, or s_i for gspo),
clip_fraction (tokens where the cap/clip engaged: for CISPO rho > eps_max; for PPO/GSPO where
the clipped term was selected and differs, i.e. the token's gradient was cut), tokens, and when
applicable tis_ratio_mean (pi_old / pi_gen before the cap) / tis_weight_mean (after it) /
tis_clip_fraction, kl_mean, entropy. The trainer logs them as train/<name>.

A call whose mask has no valid token (a micro-batch left empty by filtering) returns a zero loss
that is still attached to the graph, and stats with tokens = 0.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from workbench.errors import UserError
from workbench.rl._checks import as_mask, check_2d, check_no_nan, check_same_shape

LOSS_TYPES = ("cispo", "ppo_clip", "gspo")
_LOG_RATIO_CLAMP = 20.0


def _check_cfg(cfg: Any) -> None:
    if cfg.type not in LOSS_TYPES:
        raise UserError(f"loss.type {cfg.type!r} is not one of {list(LOSS_TYPES)}")
    if cfg.type == "cispo" and not cfg.eps_max > 0:
        raise UserError(f"loss.eps_max must be > 0, got {cfg.eps_max}")
    if cfg.type == "ppo_clip" and not (0 <= cfg.clip_low < 1 and cfg.clip_high >= 0):
        raise UserError(f"loss.clip_low must be in [0, 1) and clip_high >= 0, got {cfg.clip_low}, {cfg.clip_high}")
    if cfg.type == "gspo" and not (0 <= cfg.gspo_clip_low < 1 and cfg.gspo_clip_high >= 0):
        raise UserError(
            f"loss.gspo_clip_low must be in [0, 1) and gspo_clip_high >= 0, got {cfg.gspo_clip_low}, {cfg.gspo_clip_high}"
        )
    if cfg.tis_cap is not None and not cfg.tis_cap > 0:
        raise UserError(f"loss.tis_cap must be > 0 (or null to disable TIS), got {cfg.tis_cap}")


def _clipped_surrogate(ratio: torch.Tensor, adv: torch.Tensor, low: float, high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO pessimistic surrogate (as a loss) and where the clip engaged (the gradient was cut)."""
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - low, 1.0 + high)
    return torch.maximum(unclipped, clipped), clipped > unclipped


def _check_inputs(cfg: Any, logp: torch.Tensor, gen_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                  weights: torch.Tensor, old_logp: Optional[torch.Tensor], ref_logp: Optional[torch.Tensor],
                  entropy: Optional[torch.Tensor]) -> None:  # fmt: skip
    """Shapes and the config's needs, each refused in one line naming the problem."""
    _check_cfg(cfg)
    check_2d("logp", logp)
    check_same_shape("logp", logp, "gen_logp", gen_logp)
    check_same_shape("logp", logp, "mask", mask)
    check_same_shape("logp", logp, "weights", weights)
    for name, t in (("old_logp", old_logp), ("ref_logp", ref_logp), ("entropy", entropy)):
        if t is not None:
            check_same_shape("logp", logp, name, t)
    if not isinstance(advantages, torch.Tensor):
        raise UserError(f"advantages: expected a torch.Tensor, got {type(advantages).__name__}")
    if advantages.shape != logp.shape and tuple(advantages.shape) != (logp.shape[0],):
        raise UserError(
            f"shape mismatch: advantages has shape {tuple(advantages.shape)} but logp has shape "
            f"{tuple(logp.shape)}; expected [{logp.shape[0]}] or {list(logp.shape)}"
        )
    tis = cfg.tis_cap is not None
    if tis and old_logp is None:
        raise UserError("loss.tis_cap is set but old_logp (the trainer's pre-update log-probs) was not given")
    if old_logp is not None and not tis:
        raise UserError(
            "old_logp was given but loss.tis_cap is null: the ratio must then be against gen_logp "
            "(set loss.tis_cap to use truncated importance sampling, or do not pass old_logp)"
        )
    if cfg.kl_coef and ref_logp is None:
        raise UserError(f"loss.kl_coef = {cfg.kl_coef} needs ref_logp (reference-policy log-probs)")
    if cfg.entropy_coef and entropy is None:
        raise UserError(f"loss.entropy_coef = {cfg.entropy_coef} needs the per-token entropy")


def _ppo(ratio: torch.Tensor, adv: torch.Tensor, low: float, high: float):
    surrogate, engaged = _clipped_surrogate(ratio, adv, low, high)
    return surrogate, ratio, engaged


def _surrogate(cfg: Any, logp32: torch.Tensor, log_ratio: torch.Tensor, adv: torch.Tensor, m: torch.Tensor):
    """(per-token policy-gradient loss, ratio, where the clip engaged) of `cfg.type`."""
    if cfg.type == "cispo":  # REINFORCE with the truncated importance weight, stop-gradient
        ratio = log_ratio.detach().exp()
        return -ratio.clamp(max=cfg.eps_max) * adv * logp32, ratio, ratio > cfg.eps_max
    if cfg.type == "ppo_clip":
        return _ppo(log_ratio.exp(), adv, cfg.clip_low, cfg.clip_high)
    lengths = m.sum(dim=1).clamp(min=1.0)  # gspo: one length-normalised ratio per sequence
    seq_ratio = ((log_ratio * m).sum(dim=1) / lengths).exp()
    return _ppo(seq_ratio.unsqueeze(1).expand_as(m), adv, cfg.gspo_clip_low, cfg.gspo_clip_high)


def _stats(cfg: Any, loss: torch.Tensor, surrogate: torch.Tensor, weights32: torch.Tensor, m: torch.Tensor, valid: torch.Tensor,
           ratio: torch.Tensor, engaged: torch.Tensor, tis_ratio: Optional[torch.Tensor], kl: Optional[torch.Tensor],
           ent: Optional[torch.Tensor]) -> dict[str, float]:  # fmt: skip
    with torch.no_grad():
        n_tok = int(valid.sum())
        stats: dict[str, float] = {"loss": float(loss), "pg_loss": float((surrogate * weights32).sum()), "tokens": float(n_tok)}

        def vmean(x: torch.Tensor) -> float:
            return float((x.float() * m).sum() / n_tok) if n_tok else 0.0

        r = ratio.detach()
        stats["ratio_mean"] = vmean(r)
        stats["ratio_max"] = float(r[valid].max()) if n_tok else 0.0
        stats["ratio_min"] = float(r[valid].min()) if n_tok else 0.0
        stats["clip_fraction"] = vmean(engaged)
        if tis_ratio is not None:
            stats["tis_ratio_mean"] = vmean(tis_ratio)
            stats["tis_weight_mean"] = vmean(tis_ratio.clamp(max=cfg.tis_cap))
            stats["tis_clip_fraction"] = vmean(tis_ratio > cfg.tis_cap)
        if kl is not None:
            stats["kl_mean"] = vmean(kl.detach())
        if ent is not None:
            stats["entropy"] = vmean(ent.detach())
    return stats


def policy_loss(
    cfg: Any,
    logp: torch.Tensor,
    gen_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    weights: torch.Tensor,
    *,
    old_logp: Optional[torch.Tensor] = None,
    ref_logp: Optional[torch.Tensor] = None,
    entropy: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Scalar loss to minimise and its stats; see the module docstring for the exact formulas.

    cfg: a `LossConfig`. logp, gen_logp, mask, weights (and old_logp, ref_logp, entropy when
    given): [N, T]. advantages: [N] or [N, T]. Values at masked positions are ignored.
    """
    _check_inputs(cfg, logp, gen_logp, advantages, mask, weights, old_logp, ref_logp, entropy)
    tis = cfg.tis_cap is not None
    dev = logp.device
    m = as_mask("mask", mask).to(dev)
    valid = m.bool()
    gen_logp, weights, advantages = gen_logp.to(dev), weights.to(dev), advantages.to(dev)
    old_logp = old_logp.to(dev) if old_logp is not None else None
    ref_logp = ref_logp.to(dev) if ref_logp is not None else None
    for name, t in (("logp", logp), ("gen_logp", gen_logp), ("old_logp", old_logp), ("ref_logp", ref_logp),
                    ("entropy", entropy), ("weights", weights)):
        if t is not None:
            check_no_nan(name, t, valid)
    adv_full = advantages.detach().float()
    adv_full = adv_full.unsqueeze(1).expand_as(m) if adv_full.dim() == 1 else adv_full
    check_no_nan("advantages", adv_full, valid)

    # Masked positions may hold anything (pads): replace them before any arithmetic so that
    # 0 * NaN never reaches the loss or the gradient.
    zero = torch.zeros((), dtype=torch.float32, device=logp.device)
    logp32 = torch.where(valid, logp.float(), zero)
    glp = torch.where(valid, gen_logp.detach().float(), zero)
    adv = torch.where(valid, adv_full, zero)
    weights32 = torch.where(valid, weights.detach().float(), zero)
    ref_base = torch.where(valid, old_logp.detach().float(), zero) if tis else glp
    log_ratio = (logp32 - ref_base).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    surrogate, ratio, engaged = _surrogate(cfg, logp32, log_ratio, adv, m)

    tis_ratio = None
    if tis:
        tis_ratio = (ref_base - glp).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP).exp()
        surrogate = surrogate * tis_ratio.clamp(max=cfg.tis_cap)
    per_token = surrogate
    kl = None
    if ref_logp is not None:
        d = (torch.where(valid, ref_logp.detach().float(), zero) - logp32).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
        kl = d.exp() - d - 1.0
        if cfg.kl_coef:
            per_token = per_token + cfg.kl_coef * kl
    ent = None
    if entropy is not None:
        ent = torch.where(valid, entropy.float(), zero)
        if cfg.entropy_coef:
            per_token = per_token - cfg.entropy_coef * ent
    loss = (per_token * weights32).sum()
    return loss, _stats(cfg, loss, surrogate, weights32, m, valid, ratio, engaged, tis_ratio, kl, ent)
