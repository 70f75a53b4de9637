"""Shared by the trainer tests: generated steps with both rewards, the trainer's log-probs beside
a generator's, and a recorder of head calls."""

from __future__ import annotations

from typing import Any, Callable


def batches(cfg: Any, n: int) -> list:
    """n steps of generated groups with both rewards in each group (nothing filtered)."""
    from workbench.engine.rollout.torch_backend import Generator
    from workbench.engine.run.actors import generator_parts

    gen = Generator(**generator_parts(cfg))
    out = []
    for i in range(n):
        chunk = gen.generate(i, [4 * i, 4 * i + 1, 4 * i + 2], 4, seed=i)
        for j, g in enumerate(chunk.groups):
            g.rewards = [1.0 if (c + j) % 3 == 0 else -1.0 for c in range(len(g.rewards))]
        out.append(chunk.groups)
    return out


def next_step(tr: Any, groups: list, step: int) -> dict:
    """One trainer step's loss, gradient norm, version and (where it sends them) weights, kept."""
    result, weights = tr.train_step(groups, step)
    out = {"loss": result.stats["train/loss"], "grad_norm": result.stats["train/grad_norm"], "version": result.version}
    if weights is not None:
        out["weights"] = {k: v.clone() for k, v in weights.tensors().items()}
    return out


def same_step(a: dict, b: dict, atol: float) -> None:
    """Two `next_step`s of version 3 agree (the resume tests: the third step after a checkpoint)."""
    import pytest
    import torch

    assert a["version"] == b["version"] == 3
    assert a["loss"] == pytest.approx(b["loss"], abs=atol) and a["grad_norm"] == pytest.approx(b["grad_norm"], abs=atol)
    assert a["weights"].keys() == b["weights"].keys()
    for k in a["weights"]:
        torch.testing.assert_close(a["weights"][k], b["weights"][k], atol=atol, rtol=0, msg=k)


def logprobs_at(tr: Any, groups: list) -> tuple[Any, Any]:
    """(the trainer's log-probs, the generator's) at the completion tokens of `groups`, under the
    trainer's current weights (its own forward and head, temperature 1)."""
    import torch

    from workbench.engine.batch import PackedGroups

    for g in groups:  # both rewards in each group: no group is filtered out
        g.rewards = [1.0 if c % 2 else -1.0 for c in range(len(g.rewards))]
    _, rows, reason = tr.prepare(PackedGroups.from_groups(groups))
    assert rows is not None, reason
    pos = rows.loss_mask > 0
    with torch.no_grad():
        want, _ = tr.policy(rows.input_ids, rows.attention_mask, pos, 1.0, None)
    return want, rows.gen_logp[pos]


def head_recorder(calls: list[dict]) -> Callable:
    """A stand-in for `policy.completion_logprobs` (set it with monkeypatch or setattr) that
    records each call of the trainer's head, then runs the real one: rows, the dtypes of the
    hidden states and of the head weight as the head sees it, and that weight's values."""
    from workbench.engine.model import policy

    original = policy.completion_logprobs

    def recording(model, hidden, targets, **kw):
        w = model.get_output_embeddings().weight
        calls.append({"rows": hidden.shape[0], "hidden": hidden.dtype, "weight": w.dtype,
                      "weight_values": w.detach().float().clone()})  # fmt: skip
        return original(model, hidden, targets, **kw)

    return recording
