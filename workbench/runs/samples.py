"""Samples kept from a run: what the policy wrote, bounded on disk, read back as a DataFrame.

    w = SampleWriter(run_dir, cfg.samples)             # the engine's coordinator owns one
    kept = step_samples(batch, notes, examples, n)     # a step's kept groups (pick_groups), before training
    w.write(step, "train", kept.trained(result.trained))  # with what the trainer trained each with
    w.write(step, "val", records)                      # an evaluation's completions, up to samples.val_cap
    df = read_samples(run_dir, step=10, passed=False, domain="code", contains="def ")

Files: `<run>/samples/<kind>-<step>.parquet` (pyarrow), one per step and kind, written once
(atomically) and never appended to, so a crash loses at most the step being written. When the
folder grows past `samples.max_mb`, older steps are thinned (`thin`): the steps kept grow sparser
with age (every 2nd, then every 4th... step) while the recent ones stay whole; the first step
is kept while the bound allows it and the newest always, none is dropped wholesale by age alone.
A trainer restart redoes steps: `back_to(step)` removes the files after the checkpoint so each step is kept once.

One record per completion (`COLUMNS`): step, kind (train / val), group (its index in the step),
prompt_id, domain, prompt (rendered as the generator tokenised it: the system turn and the chat
template included), completion, passed, verdict, reward (the weighted sum of `reward.functions`,
else the checker's +1 / -1), one `reward/<fn>` column per reward function, advantage and
loss_weight (train: the trainer's own, after the staleness drop, the recipe's penalties and the
zero-variance filter, rl/step.TrainedValues; NaN and 0 where not trained; val: NaN), trained
(the completion was in the rows the step's update was computed over), version (the policy
version that sampled its first token), version_last, staleness (the trainer's version minus
`version`), length (tokens), truncated (hit the token limit) and interrupted (length control
forced the end). An environment's samples add `turns`: the episode after its prompt as a JSON list
of {"role", "text"}, one entry per sampled turn ("assistant") or environment message ("tool", "user").
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np
import pandas as pd

from workbench.errors import UserError

SAMPLES_DIR = "samples"
SAMPLES_KEY = "_samples"  # an evaluation's records in its result dict ("_": not a metric, metrics.RunLog)
COLUMNS = ["step", "kind", "group", "prompt_id", "domain", "prompt", "completion", "passed", "verdict", "reward",
           "advantage", "loss_weight", "trained", "version", "version_last", "staleness", "length", "truncated",
           "interrupted"]  # fmt: skip
_FILE = re.compile(r"^(train|val)-(\d+)\.parquet$")


def samples_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / SAMPLES_DIR


def step_files(run_dir: str | Path) -> dict[int, list[Path]]:
    """{step: its sample files}, steps ascending."""
    out: dict[int, list[Path]] = {}
    d = samples_dir(run_dir)
    for p in sorted(d.iterdir()) if d.is_dir() else []:
        m = _FILE.match(p.name)
        if m:
            out.setdefault(int(m.group(2)), []).append(p)
    return dict(sorted(out.items()))


def pick_groups(correct: Sequence[Sequence[bool]], n: int) -> list[int]:
    """Indices of up to `n` groups to keep, `correct` being each group's verdicts. Mixed groups
    first (some passed, some failed: the ones the trainer learns from; an all-pass or all-fail group
    is dropped by the zero-variance filter): the best and the worst of them, then the next mixed
    ones in order; where there are too few, a passing and a failing group (every completion
    passed, none passed), then the rest in order."""
    if n <= 0 or not correct:
        return []
    rates = [float(np.mean(c)) if len(c) else 0.0 for c in correct]
    mixed = [i for i, r in enumerate(rates) if 0.0 < r < 1.0]
    first = [max(mixed, key=lambda i: rates[i]), min(mixed, key=lambda i: rates[i])] if mixed else []
    order = first + mixed + [int(np.argmax(rates)), int(np.argmin(rates))] + list(range(len(correct)))
    return sorted(list(dict.fromkeys(order))[:n])


def file_notes(store: dict, groups: Any, notes: list[Optional[dict]]) -> None:
    """File each of packed `groups`' notes in `store` under (chunk id, prompt id), in order (a
    prompt drawn twice in one chunk gets two), until `take_notes` takes them with their groups."""
    for key, note in zip(zip(groups.chunk_id.tolist(), groups.prompt_id.tolist()), notes):
        store.setdefault(key, []).append(note)


def take_notes(store: dict, groups: Any) -> list[Optional[dict]]:
    """The notes of packed `groups` (taken from the buffer in the order they came), out of `store`."""
    out = []
    for key in zip(groups.chunk_id.tolist(), groups.prompt_id.tolist()):
        filed = store.get(key)
        out.append(filed.pop(0) if filed else None)
        if filed == []:
            del store[key]
    return out


@dataclass
class KeptSamples:
    """A train step's kept records, picked when the step is sent to the trainer, and `rows`: each
    record's sequence in the step's packed batch, where the trainer's values for it are found."""

    records: list[dict[str, Any]]
    rows: list[int]

    def trained(self, values: Any) -> list[dict[str, Any]]:
        """The records with what the trainer trained each with (`values`: the step's
        rl/step.TrainedValues, StepResult.trained; None: not known, none marked trained)."""
        out = []
        for rec, i in zip(self.records, self.rows):
            on = values is not None and bool(values.trained[i])
            out.append({**rec, "trained": on, "advantage": float(values.advantage[i]) if on else math.nan,
                        "loss_weight": float(values.loss_weight[i]) if on else 0.0})  # fmt: skip
        return out


def step_samples(batch: Any, notes: list[Optional[dict]], examples: list[Any], n: int) -> KeptSamples:
    """The records of the `n` groups a train step keeps (pick_groups, among those with a note) of
    its packed `batch`; `examples`: the task's training examples. What the trainer trained them
    with is added once the step is trained (`KeptSamples.trained`)."""
    noted = [g for g in range(len(batch)) if notes[g] is not None]
    if n <= 0 or not noted:
        return KeptSamples([], [])
    off = np.concatenate([[0], np.cumsum(batch.size)]).astype(np.int64)
    keep = [noted[i] for i in pick_groups([batch.correct[off[g] : off[g + 1]] for g in noted], n)]
    return train_records(batch, keep, notes, {g: examples[int(batch.prompt_id[g])] for g in keep})


def train_records(batch: Any, keep: list[int], notes: list[Optional[dict]], prompts: dict[int, Any]) -> KeptSamples:
    """One record per completion of the kept groups `keep` of a packed step `batch`
    (engine.batch.PackedGroups); `notes[g]` is group g's texts and verdicts as the generator decoded
    them and its rendered prompt (None: not kept), `prompts[g]` its Example (domain; its raw prompt
    only where a note holds no rendering)."""
    off = np.concatenate([[0], np.cumsum(batch.size)]).astype(np.int64)
    tok = np.concatenate([[0], np.cumsum(batch.t_len)]).astype(np.int64)
    out, rows = [], []
    for g in keep:
        note, ex = notes[g], prompts[g]
        if note is None:
            continue
        for j, i in enumerate(range(off[g], off[g + 1])):
            vers = batch.versions[tok[i] : tok[i + 1]]
            vers = vers[vers >= 0]  # context before an episode's first turn has no version
            rec = {
                "group": g, "prompt_id": int(batch.prompt_id[g]), "domain": ex.domain, "prompt": note.get("prompt", ex.prompt),
                "completion": note["texts"][j], "passed": bool(batch.correct[i]), "verdict": note["verdicts"][j],
                "reward": float(batch.rewards[i]), "advantage": math.nan, "loss_weight": 0.0, "trained": False,
                "version": int(vers.min()) if len(vers) else -1, "version_last": int(vers.max()) if len(vers) else -1,
                "length": int(batch.t_len[i]), "truncated": not bool(batch.finished[i]),
                "interrupted": bool(batch.interrupted[i]),
            }  # fmt: skip
            rec.update({f"reward/{k}": float(v[j]) for k, v in (note.get("values") or {}).items()})
            if note.get("turns") is not None:
                rec["turns"] = note["turns"][j]
            out.append(rec)
            rows.append(int(i))
    return KeptSamples(out, rows)


def group_note(texts: list[str], verdicts: list[Any], turns: Optional[list[str]] = None) -> dict[str, Any]:
    """What the generator keeps of one group for the samples: its decoded texts, verdict names and
    each reward function's values (`Verdict.values`, with `reward.functions`); an environment's
    episodes also their `turns` (one JSON list of {"role", "text"} per completion: engine/rollout/episodes.py);
    the generator adds `prompt`, the prompt rendered as it tokenised it (engine/rollout/worker.py)."""
    values: dict[str, list[float]] = {}
    for v in verdicts:
        for k, x in (getattr(v, "values", None) or {}).items():
            values.setdefault(k, []).append(float(x))
    note = {"texts": list(texts), "verdicts": [v.verdict for v in verdicts],
            "values": {k: xs for k, xs in values.items() if len(xs) == len(verdicts)}}  # fmt: skip
    if turns is not None:
        note["turns"] = list(turns)
    return note


def val_records(examples: list[Any], ids: list[int], k: int, texts: list[str], outs: list[Any], verdicts: list[Any],
                version: int, cap: int, *, prompt_text: Callable[[int], str],
                turns: Optional[list[str]] = None) -> list[dict[str, Any]]:  # fmt: skip
    """An evaluation's completions (prompt-major, `k` per prompt `ids`), the first `cap` of them;
    `prompt_text(prompt id)`: the prompt rendered as the generator tokenised it; `turns`: an
    environment's episodes as turns (group_note)."""
    from workbench.rl.shaping import reward_for  # here: rl/shaping imports torch, which `workbench samples` does not need

    out = []
    for i, (text, c, v) in enumerate(zip(texts[:cap], outs, verdicts)):
        ex, gi = examples[ids[i // k]], i // k
        rec = {"group": gi, "prompt_id": int(ids[gi]), "domain": ex.domain, "prompt": prompt_text(int(ids[gi])),
               "completion": text, "passed": bool(v.passed), "verdict": v.verdict,
               "reward": float(v.reward) if v.reward is not None else reward_for(v.passed),
               "advantage": math.nan, "loss_weight": 0.0, "trained": False, "version": int(version),
               "version_last": int(version), "staleness": 0,
               "length": len(c.tokens), "truncated": not bool(c.finished), "interrupted": bool(c.interrupted)}  # fmt: skip
        rec.update({f"reward/{name}": float(x) for name, x in (getattr(v, "values", None) or {}).items()})
        if turns is not None:
            rec["turns"] = turns[i]
        out.append(rec)
    return out


class SampleWriter:
    """Writes a run's kept samples into `<run>/samples/` and keeps the folder under the bound.
    `cfg`: the run's `samples:` section (groups_per_step, val_cap, max_mb)."""

    def __init__(self, run_dir: str | Path, cfg: Any):
        self.dir = samples_dir(run_dir)
        self.cfg = cfg

    @property
    def enabled(self) -> bool:
        return self.cfg.max_mb > 0

    def write(self, step: int, kind: str, records: list[dict[str, Any]], *, trained_version: Optional[int] = None) -> Optional[Path]:
        """The step's records as one Parquet file (replacing a redone step's); then thin the folder.
        `trained_version`: the trainer's policy version at the step (a train step's staleness)."""
        if not records or not self.enabled:
            return None
        if trained_version is not None:
            records = [{**r, "staleness": trained_version - r["version"]} for r in records]
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.dir.mkdir(parents=True, exist_ok=True)
        df = pd.DataFrame([{"step": step, "kind": kind, **r} for r in records])
        path = self.dir / f"{kind}-{step:06d}.parquet"
        tmp = path.with_suffix(".parquet.tmp")
        pq.write_table(pa.Table.from_pandas(df, preserve_index=False), tmp, compression="zstd")
        os.replace(tmp, path)  # a reader never sees half a file
        thin(self.dir.parent, int(self.cfg.max_mb * 1024 * 1024))
        return path

    def back_to(self, step: int) -> None:
        """Remove the files of steps after `step` (a restart from a checkpoint redoes them)."""
        for s, paths in step_files(self.dir.parent).items():
            if s > step:
                for p in paths:
                    p.unlink(missing_ok=True)


def folder_bytes(run_dir: str | Path) -> int:
    return sum(p.stat().st_size for ps in step_files(run_dir).values() for p in ps)


def thin(run_dir: str | Path, max_bytes: int) -> list[int]:
    """While the samples take more than `max_bytes`, drop one step: the one whose neighbours are
    closest for its age (gap / age smallest), so the steps kept grow sparser the older they are
    (every 2nd, then every 4th...) and the recent ones stay whole; the first step goes only when
    it and the newest alone pass the bound, and the newest always stays (alone, a step larger than
    the bound is kept). Returns the steps dropped."""
    dropped: list[int] = []
    files = step_files(run_dir)
    total = sum(p.stat().st_size for ps in files.values() for p in ps)
    while total > max_bytes and len(files) > 1:
        steps = list(files)
        newest = steps[-1]
        i = 0 if len(steps) == 2 else min(range(1, len(steps) - 1), key=lambda i: (steps[i + 1] - steps[i - 1]) / (newest - steps[i] + 1))
        for p in files.pop(steps[i]):
            total -= p.stat().st_size
            p.unlink()
        dropped.append(steps[i])
    return dropped


def read_samples(run_dir: str | Path, *, step: Optional[int] = None, passed: Optional[bool] = None,
                 domain: Optional[str] = None, contains: Optional[str] = None,
                 kind: Optional[str] = None) -> pd.DataFrame:  # fmt: skip
    """The run's kept samples (COLUMNS, plus `reward/<fn>` ones), filtered: at `step`, passed or
    not, of a task mixture's `domain`, with `contains` in the prompt or completion (case-insensitive),
    of `kind` ("train" or "val"). An empty frame (with COLUMNS) when nothing is kept or matches;
    an unknown `step` is a UserError naming the steps kept."""
    files = step_files(run_dir)
    if step is not None:
        if step not in files:
            raise UserError(f"no samples at step {step} in {samples_dir(run_dir)}; steps kept: {steps_text(list(files))}")
        files = {step: files[step]}
    paths = [p for ps in files.values() for p in ps if kind is None or p.name.startswith(kind + "-")]
    if not paths:
        return pd.DataFrame(columns=COLUMNS)
    df = pd.concat([pd.read_parquet(p) for p in paths], ignore_index=True)
    return filter_frame(df, passed=passed, domain=domain, contains=contains)


def filter_frame(df: pd.DataFrame, *, steps: Optional[tuple[int, int]] = None, passed: Optional[bool] = None,
                 domain: Optional[str] = None, contains: Optional[str] = None,
                 kind: Optional[str] = None) -> pd.DataFrame:  # fmt: skip
    """`read_samples`' filters on a frame already read (the dashboard reads once, filters often):
    `steps` an inclusive (first, last) range, and the others as read_samples'."""
    if steps is not None:
        df = df[(df["step"] >= steps[0]) & (df["step"] <= steps[1])]
    if kind is not None:
        df = df[df["kind"] == kind]
    if passed is not None:
        df = df[df["passed"] == bool(passed)]
    if domain is not None:
        df = df[df["domain"] == domain]
    if contains:
        hit = df["prompt"].str.contains(contains, case=False, regex=False)
        df = df[hit | df["completion"].str.contains(contains, case=False, regex=False)]
    return df.reset_index(drop=True)


def prompt_changes(da: pd.DataFrame, db: pd.DataFrame) -> dict[int, int]:
    """{prompt_id: passes in `db` minus passes in `da`} for the prompts both evaluations kept, the
    biggest change first (ties in `da`'s order): what `--diff` and the dashboard's side by side show."""
    pa = da.groupby("prompt_id", sort=False)["passed"].sum()  # sort=False: da's order, for the ties
    pb = db.groupby("prompt_id", sort=False)["passed"].sum()
    change = {int(p): int(pb[p]) - int(n) for p, n in pa.items() if p in pb.index}
    return dict(sorted(change.items(), key=lambda kv: -abs(kv[1])))  # a stable sort


def steps_text(steps: list[int]) -> str:
    """Steps for a message: all of them, or the first and last few."""
    if not steps:
        return "none"
    if len(steps) <= 12:
        return ", ".join(map(str, steps))
    return ", ".join(map(str, steps[:5])) + ", ..., " + ", ".join(map(str, steps[-5:]))
