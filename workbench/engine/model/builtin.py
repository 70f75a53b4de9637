"""The built-in model: a tiny GPT over a character tokenizer, warm-started by SFT and cached.

    folder, from_cache = builtin_dir(cfg.model, task)       # built once, then found in the cache
    model, tok = load_builtin(cfg.model, task)              # the same, loaded

"builtin:tiny" is a small GPT-2 (sizes from ModelConfig) over a character tokenizer made
locally from the task's alphabet (`build_char_tokenizer`). It is warm-started by a short
supervised run on the task's TRAIN split (`sft_warm_start`: loss on answer tokens + EOS only;
left padding with position ids from the mask, through `causal_lm_forward`, exactly as the
generator and trainer see sequences), so RL starts from a low but non-zero pass rate. The
result is saved with `save_pretrained` under `cache_dir/<key>/`, where the key hashes
everything the weights depend on (`builtin_cache_key`); later calls load it from there. A file
lock plus an atomic rename keep two processes that build at once from corrupting the cache.
`model.workbench_info` tells how it was obtained (`from_cache`, SFT time and loss, parameter
count). The run's driver resolves the folder once (`load.resolved_model`); actors load that
folder like any local model and never need the task for it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import shutil
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from workbench.engine.model.hf_dir import load_hf_dir, wants_chat_template
from workbench.engine.model.logs import no_progress_bars
from workbench.engine.model.sampling import encode, left_pad, sampled_pass_rate
from workbench.errors import UserError
from workbench.engine.model.forward import causal_lm_forward

log = logging.getLogger(__name__)

BUILTIN_PREFIX = "builtin:"
BUILTIN_SIZES = ("tiny",)
SPECIAL_TOKENS = ("<pad>", "<eos>", "<bos>", "<unk>")
BUILDER_VERSION = 2  # bump when the builtin recipe changes, so old caches are not reused
INFO_FILE = "workbench_builtin.json"
# The builtin warm-up stops once the sampled train pass rate reaches this: low, not zero,
# leaving RL clear headroom (ModelConfig.sft_target_pass_rate overrides it when present).
SFT_TARGET_PASS_RATE = 0.15


# ---------------------------------------------------------------------------- tokenizer


def build_char_tokenizer(alphabet: str):
    """A character-level `PreTrainedTokenizerFast`: one token per character of `alphabet`.

    Ids 0-3 are <pad>, <eos>, <bos>, <unk>; unknown characters map to <unk>. Nothing is added
    around the text when encoding; decoding concatenates characters (no spaces inserted).
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    if not alphabet:
        raise UserError("cannot build a character tokenizer from an empty alphabet")
    vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
    for ch in alphabet:
        vocab.setdefault(ch, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # every char
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        unk_token="<unk>",
        padding_side="left",
    )


# ---------------------------------------------------------------------------- model, warm-up, cache


def target_text(ex: Any) -> str:
    """What the warm-up teaches for `ex`: its reference completion where it has one (code: the
    answer is a test spec, not a completion), else its answer."""
    return getattr(ex, "reference", "") or ex.answer


def task_alphabet(task: Any) -> str:
    """The declared alphabet plus every character in the task's examples (sorted, unique)."""
    chars = set(getattr(task, "alphabet", "") or "")
    for ex in list(task.train) + list(task.val):
        chars.update(ex.prompt)
        chars.update(target_text(ex))
    return "".join(sorted(chars))


def _n_positions(task: Any) -> int:
    longest = max(len(ex.prompt) + len(target_text(ex)) for ex in list(task.train) + list(task.val))
    # Room for RL completions well past the reference answer length.
    return max(64, 1 << math.ceil(math.log2(2 * longest + 2)))


def builtin_shape(task: Any) -> tuple[Any, int]:
    """(tokenizer, context length) of the builtin model for `task`, without building it: what the
    driver's preflight checks lengths against (the same tokenizer and n_positions the build uses)."""
    return build_char_tokenizer(task_alphabet(task)), _n_positions(task)


def _target(model_cfg: Any) -> float | None:
    # ModelConfig may not have the field (yet); the builtin default applies then.
    return getattr(model_cfg, "sft_target_pass_rate", SFT_TARGET_PASS_RATE)


def builtin_cache_key(model_cfg: Any, task: Any) -> str:
    """Hash of everything the builtin weights depend on (not cache_dir / dtype)."""
    h = hashlib.sha256()
    for ex in task.train:
        h.update(f"{ex.prompt}\x00{ex.answer}\x01{getattr(ex, 'reference', '')}".encode())
    key = {
        "version": BUILDER_VERSION,
        "path": model_cfg.path,
        "n_layer": model_cfg.n_layer,
        "n_embd": model_cfg.n_embd,
        "n_head": model_cfg.n_head,
        "sft_steps": model_cfg.sft_steps,
        "sft_lr": model_cfg.sft_lr,
        "sft_batch_size": model_cfg.sft_batch_size,
        "sft_target_pass_rate": _target(model_cfg),
        "checker": getattr(task, "checker_name", ""),
        "task": task.name,
        "difficulty": getattr(task, "difficulty", None),
        "seed": getattr(task, "seed", 0),
        "alphabet": task_alphabet(task),
        "n_positions": _n_positions(task),
        "train_sha": h.hexdigest(),
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def builtin_cache_dir(model_cfg: Any, task: Any) -> Path:
    return Path(model_cfg.cache_dir).expanduser() / f"{model_cfg.path.split(':', 1)[1]}-{builtin_cache_key(model_cfg, task)}"


def build_tiny_model(model_cfg: Any, tokenizer: Any, n_positions: int, seed: int) -> Any:
    """A freshly initialised GPT-2 sized by `model_cfg`, vocabulary from `tokenizer`."""
    from transformers import GPT2Config, GPT2LMHeadModel

    if model_cfg.n_embd % model_cfg.n_head:
        raise UserError(f"model.n_embd ({model_cfg.n_embd}) must be divisible by model.n_head ({model_cfg.n_head})")
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=n_positions,
        n_embd=model_cfg.n_embd,
        n_layer=model_cfg.n_layer,
        n_head=model_cfg.n_head,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return GPT2LMHeadModel(config)


def sft_warm_start(
    model: Any,
    tokenizer: Any,
    examples: Sequence[Any],
    *,
    steps: int,
    lr: float,
    batch_size: int,
    seed: int,
    target_pass_rate: float | None = None,
    checker: Callable[[str, str], bool] | None = None,
    score: Callable[[list[str], list[Any]], list[bool]] | None = None,
    check_every: int = 20,
    check_prompts: int = 256,
    progress: bool = True,
) -> dict[str, Any]:
    """Supervised warm-up: next-token loss on answer + EOS only, prompts left-padded.

    AdamW with a short linear warm-up then cosine decay to 10% of `lr` over `steps`. With
    `target_pass_rate`, every `check_every` steps the sampled (temperature 1) pass rate on the
    first `check_prompts` training examples is measured, and training stops once it reaches
    the target: where an RL run starts then depends on the target, not on how fast one seed
    happens to learn. Returns stats (steps run, time, loss, last measured train pass rate).
    """
    from tqdm.auto import tqdm

    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    encoded = []
    for ex in examples:
        p, a = encode(tokenizer, ex.prompt), encode(tokenizer, target_text(ex)) + [eos]
        encoded.append((p + a, len(p)))
    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0, betas=(0.9, 0.98))
    warm = max(1, steps // 10)

    def lr_at(step: int) -> float:
        if step < warm:
            return lr * (step + 1) / warm
        frac = (step - warm) / max(1, steps - warm)
        return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))

    gen = torch.Generator().manual_seed(seed)
    probe = list(examples[:check_prompts])
    probe_tokens = max(len(encode(tokenizer, target_text(ex))) for ex in probe) + 1
    train_rate: float | None = None
    model.train()
    losses: list[float] = []
    t0 = time.perf_counter()
    bar = tqdm(range(steps), desc="warm-up (SFT)", disable=not progress, leave=False)
    for step in bar:
        idx = torch.randint(len(encoded), (batch_size,), generator=gen).tolist()
        seqs = [encoded[i][0] for i in idx]
        ids, mask = left_pad(seqs, pad)
        # Loss on the answer tokens: targets after the prompt (right-aligned, so count from the end).
        target = torch.zeros_like(mask, dtype=torch.bool)
        for row, i in enumerate(idx):
            full, plen = encoded[i]
            target[row, ids.shape[1] - (len(full) - plen) :] = True
        ids, mask, target = ids.to(device), mask.to(device), target.to(device)
        logits, _ = causal_lm_forward(model, ids, mask, fp32_head=True)
        logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        tmask = target[:, 1:].float()
        loss = -(logp * tmask).sum() / tmask.sum()
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if progress and step % 10 == 0:
            bar.set_postfix(loss=f"{losses[-1]:.3f}", train_pass=train_rate)
        if target_pass_rate and step + 1 >= warm and (step + 1) % check_every == 0:
            model.eval()
            train_rate = sampled_pass_rate(
                model, tokenizer, probe, k=2, max_new_tokens=probe_tokens, seed=seed + step, checker=checker, score=score
            )
            model.train()
            if train_rate >= target_pass_rate:
                break
    bar.close()
    model.eval()
    tail = losses[-max(1, len(losses) // 10) :]
    return {
        "sft_seconds": time.perf_counter() - t0,
        "sft_final_loss": sum(tail) / len(tail),
        "sft_steps_run": len(losses),
        "sft_train_pass_rate": train_rate,
        "sft_target_pass_rate": target_pass_rate,
    }


@contextlib.contextmanager
def warmup_scorer(task: Any):
    """The warm-up probe's scorer: None (the task's checker) for a single task without code, else
    `check_batch` by example (a mix: each domain's checker; code: a local sandbox, fail closed)."""
    if not getattr(task, "parts", None) and not getattr(task, "sandboxed", False):
        yield None
        return
    from workbench.tasks.base import check_batch

    sandbox = None
    if task.sandboxed:
        from workbench.tasks.sandbox import LocalSandbox, require_sandbox

        require_sandbox()
        sandbox = LocalSandbox(workers=1).__enter__()
    try:
        yield lambda texts, examples: [v.passed for v in check_batch(task, texts, examples, sandbox=sandbox)]
    finally:
        if sandbox is not None:
            sandbox.__exit__(None, None, None)


def _build_builtin(model_cfg: Any, task: Any, final: Path, progress: bool) -> dict[str, Any]:
    """Train the builtin model and move it into `final` atomically."""
    tokenizer = build_char_tokenizer(task_alphabet(task))
    seed = int(getattr(task, "seed", 0))
    model = build_tiny_model(model_cfg, tokenizer, _n_positions(task), seed)
    with warmup_scorer(task) as score:
        stats = sft_warm_start(
            model,
            tokenizer,
            task.train,
            steps=model_cfg.sft_steps,
            lr=model_cfg.sft_lr,
            batch_size=model_cfg.sft_batch_size,
            seed=seed,
            target_pass_rate=_target(model_cfg),
            checker=task.checker,
            score=score,
            progress=progress,
        )
    info = {
        **stats,
        "params": sum(p.numel() for p in model.parameters()),
        "task": task.name,
        "difficulty": getattr(task, "difficulty", None),
        "model_cfg": {k: v for k, v in asdict(model_cfg).items() if k != "cache_dir"},
        "builder_version": BUILDER_VERSION,
    }
    tmp = final.parent / f".tmp-{final.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    with no_progress_bars():
        model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / INFO_FILE).write_text(json.dumps(info, indent=2))
    os.replace(tmp, final)  # atomic: readers see no directory or a complete one
    return info


_HF_LOCK = threading.RLock()


def builtin_dir(model_cfg: Any, task: Any, *, progress: bool = True) -> tuple[Path, bool]:
    """(folder, from_cache) of the builtin model for (model_cfg, task), built first if absent."""
    size = model_cfg.path.split(":", 1)[1]
    if size not in BUILTIN_SIZES:
        raise UserError(f"model.path: unknown builtin model {model_cfg.path!r} (known: builtin:{', builtin:'.join(BUILTIN_SIZES)})")
    if task is None or not task.train:
        raise UserError("model.path=builtin:tiny needs a task with training examples to warm-start on")
    if model_cfg.sft_steps < 1 or model_cfg.sft_batch_size < 1 or model_cfg.sft_lr <= 0:
        raise UserError("model.sft_steps and model.sft_batch_size must be >= 1 and model.sft_lr > 0")
    from filelock import FileLock

    final = builtin_cache_dir(model_cfg, task)
    final.parent.mkdir(parents=True, exist_ok=True)
    # transformers' loading patches module construction process-wide (meta-device init), so
    # two threads building or loading at once corrupt each other: one at a time per process.
    with _HF_LOCK:
        if (final / INFO_FILE).is_file():
            return final, True
        # Only one process trains; the others wait here and then load its result.
        locks = final.parent / ".locks"
        locks.mkdir(exist_ok=True)
        with FileLock(str(locks / f"{final.name}.lock")):
            if (final / INFO_FILE).is_file():
                return final, True
            shutil.rmtree(final, ignore_errors=True)  # a partial directory from an old crash
            log.info("building %s for task %s into %s", model_cfg.path, task.name, final)
            _build_builtin(model_cfg, task, final, progress)
            return final, False


def load_builtin(model_cfg: Any, task: Any, *, device: str = "cpu", dtype: Any = None, progress: bool = True) -> tuple[Any, Any]:
    """The cached builtin model for (model_cfg, task), built first if absent."""
    final, from_cache = builtin_dir(model_cfg, task, progress=progress)
    if from_cache:
        log.info("loaded %s from cache %s", model_cfg.path, final)
    with _HF_LOCK:
        model, tokenizer = load_hf_dir(final, device=device, dtype=dtype, chat_template=wants_chat_template(task))
    model.workbench_info = {**json.loads((final / INFO_FILE).read_text()), "from_cache": from_cache, "dir": str(final)}
    return model, tokenizer
