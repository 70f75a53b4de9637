"""A finished run folder with kept samples (written by workbench.runs.samples' own SampleWriter) and a
real health flag (entropy collapses from step 40 and validation falls back to its start:
workbench.runs.health.check_health over its rows, in summary.json as the engine writes it), for
the dashboard's Samples tab and banner, without Ray.

Its samples, by construction:
- train steps 5, 10, ..., 70: two groups of 4 completions; group 0 (prompt 2*step) all pass,
  group 1 (prompt 2*step+1) one pass; group 1's last completion is long (folded) and truncated;
  as the trainer marks them, group 0 is not trained (zero variance: advantage NaN, loss weight 0)
  and group 1 is, with its rewards minus their mean as advantages and a loss weight of 1/4 each;
  a `reward/format` column.
- evaluations at steps 0, 10, ..., 70: validation prompts 0..3 (domains "add" for even ids, "count"
  for odd), 2 completions each; prompt p's completions pass from step 20*p on (0 passes
  from the start, 3 from step 60), so steps 0 -> 70 gains prompts 1, 2, 3.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.run_folder import write_run
from workbench.config import SamplesConfig
from workbench.runs.health import check_health
from workbench.runs.samples import SampleWriter

LAST = 70
COLLAPSE = 40  # train/entropy falls from this step on
LONG = "\n".join(f"step {i}: keep counting the digits again" for i in range(30)) + "\nANSWER 41"


def _rec(group: int, pid: int, domain: str, text: str, passed: bool, reward: float, adv: float, version: int, **kw) -> dict:
    return {"group": group, "prompt_id": pid, "domain": domain, "prompt": f"Question {pid}: what is {pid} + {pid}?",
            "completion": text, "passed": passed, "verdict": "pass" if passed else "fail", "reward": reward,
            "reward/format": 0.5 if passed else 0.0, "advantage": adv, "loss_weight": kw.get("loss_weight", 0.0),
            "trained": kw.get("trained", False), "version": version, "version_last": version,
            "length": len(text.split()), "truncated": kw.get("truncated", False), "interrupted": False}  # fmt: skip


def train_records(step: int) -> list[dict]:
    out = []
    for g, passes in ((0, [True] * 4), (1, [True, False, False, False])):
        rewards = [1.0 if p else -1.0 for p in passes]
        mean = sum(rewards) / len(rewards)
        for j, (p, r) in enumerate(zip(passes, rewards)):
            long = g == 1 and j == 3
            text = LONG if long else (f"{2 * step + g} * 2 = {4 * step + 2 * g}" if p else "I think it is 7")
            trained = mean not in (1.0, -1.0)  # zero variance: left out by the trainer
            out.append(_rec(g, 2 * step + g, "add", text, p, r, r - mean if trained else float("nan"), step - 1,
                            truncated=long, trained=trained, loss_weight=0.25 if trained else 0.0))
    return out


def val_records(step: int) -> list[dict]:
    return [_rec(p, p, "add" if p % 2 == 0 else "count", f"{2 * p}" if step >= 20 * p else f"wrong {p}",
                 step >= 20 * p, 1.0 if step >= 20 * p else -1.0, float("nan"), step)
            for p in range(4) for _ in range(2)]  # fmt: skip


def write_samples_run(folder: Path) -> Path:
    """The run folder described above; returns it."""
    write_run(folder, LAST // 10 + 1, every=10)
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    first_val = next(r["val/pass_rate"] for r in rows if "val/pass_rate" in r)
    for r in rows:
        if "train/entropy" in r and r["step"] >= COLLAPSE:
            r["train/entropy"] = 0.05
        if "val/pass_rate" in r and r["step"] >= COLLAPSE:  # validation loses its gain: a collapse, not learning to answer
            r["val/pass_rate"] = first_val
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    w = SampleWriter(folder, SamplesConfig())
    for step in range(0, LAST + 1, 5):
        if step % 10 == 0:
            w.write(step, "val", val_records(step))
        if step:
            w.write(step, "train", train_records(step), trained_version=step)
    flags = check_health(rows, None, run=str(folder))
    assert [f.rule for f in flags] == ["entropy"], flags
    (folder / "summary.json").write_text(json.dumps({"status": "finished", "steps": LAST, "health": [f.as_dict() for f in flags]}))
    return folder


TOOL_TURNS = [{"role": "assistant", "text": '<tool_call>\n{"name": "add", "arguments": {"a": 47, "b": 38}}\n</tool_call>'},
              {"role": "tool", "text": "85"},
              {"role": "assistant", "text": '<tool_call>\n{"name": "submit", "arguments": {"answer": 85}}\n</tool_call>'},
              {"role": "tool", "text": "Submitted 85."},
              {"role": "assistant", "text": "The answer is 85."}]  # fmt: skip


def write_env_samples_run(folder: Path) -> Path:
    """A finished run of a tool environment whose kept samples are conversations (their `turns` column,
    as engine/rollout/episodes.episode_turns writes it): step 1, one group of two episodes, one
    that used the tools and passed, one that answered without them and failed."""
    write_run(folder, 2, every=1)
    w = SampleWriter(folder, SamplesConfig())
    recs = []
    for j, (turns, passed) in enumerate(((TOOL_TURNS, True), (TOOL_TURNS[-1:], False))):
        rec = _rec(0, 7, "", "<raw episode text>", passed, 1.0 if passed else 0.0, 0.5 if passed else -0.5, 0,
                   trained=True, loss_weight=0.5)  # fmt: skip
        rec["prompt"] = "Ann has 47 apples and buys 38 more. How many apples does she have now?"
        rec["turns"] = json.dumps(turns)
        recs.append(rec)
    w.write(1, "train", recs, trained_version=1)
    (folder / "summary.json").write_text(json.dumps({"status": "finished", "steps": 1, "health": []}))
    return folder
