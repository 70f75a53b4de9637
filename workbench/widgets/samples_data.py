"""What the dashboard's Samples tab and health banner show, as typed values: no widget, no browser.

    frame = SampleFrame.read(view)                           # the run's kept samples, read once
    rows = filter_samples(frame.df, SampleQuery(steps=(10, 20), passed=False, text="def "))
    gs = groups(rows)                                        # one Group per (step, kind, group): a prompt's completions
    gs = groups_matching(frame.df, rows)                     # the same groups whole (every completion, not just the matches)
    g = group_at(frame.df, step=20, kind="train", group=3)  # its rewards and the trainer's advantages side by side
    sbs = side_by_side(frame.df, 0, frame.df, 20)            # two evaluations' completions, same prompts
    points = eval_points(view, frame.df)                     # the curve's evaluations, with their samples or not
    flags = health_flags(view)                               # summary.json's `health` (else the rules over the rows)

The samples come from workbench.runs.samples (its filters: `filter_frame`; the pass-count
changes between two evaluations: `prompt_changes`, as `workbench samples --diff` shows them);
workbench/widgets/samples_view.py draws these values.
"""

from __future__ import annotations

import json

import math
import textwrap
from dataclasses import dataclass, field
from typing import Any, Optional

import pandas as pd

from workbench.errors import UserError
from workbench.runs.health import HealthFlag, check_health


@dataclass(frozen=True)
class Folded:
    """A text as display lines: the start and the end shown, the middle (if any) hidden."""

    head: list[str]
    hidden: list[str]
    tail: list[str]


def fold_text(text: str, *, width: int, keep: Optional[int], tail: int = 2) -> Folded:
    """`text` wrapped to `width` columns; past `keep` lines its middle is hidden and its last `tail`
    lines stay shown (an answer, or where the token limit cut it). The one folding rule of
    `workbench samples` (the terminal) and the dashboard (a click away)."""
    lines = [w for line in (text or "").splitlines() or [""] for w in (textwrap.wrap(line, max(8, width)) or [""])]
    if keep is None or len(lines) <= keep:
        return Folded(lines, [], [])
    t = min(tail, max(0, keep - 1))
    head = lines[: keep - t]
    return Folded(head, lines[len(head): len(lines) - t], lines[len(lines) - t:])


@dataclass(frozen=True)
class SampleQuery:
    """The Samples tab's filters; None (or "") leaves one out."""

    steps: Optional[tuple[int, int]] = None  # inclusive
    passed: Optional[bool] = None
    domain: Optional[str] = None
    text: str = ""  # in the prompt or the completion, case-insensitive
    kind: Optional[str] = None  # "train" or "val"


@dataclass(frozen=True)
class Completion:
    """One kept completion: its text, verdict, reward (and each reward function's), whether the
    trainer trained on it (`trained`; None for a validation one, or a file from before the column)
    with which advantage and loss weight (None where not trained), the policy version that sampled it."""

    text: str
    passed: bool
    verdict: str
    reward: float
    advantage: Optional[float]
    rewards: dict[str, float]
    version: int
    staleness: Optional[int]
    length: int
    truncated: bool
    interrupted: bool
    trained: Optional[bool] = None
    loss_weight: Optional[float] = None


@dataclass(frozen=True)
class Group:
    """One prompt's completions at one step: a training group, or an evaluation's completions of it.
    Its label counts the completions it holds: build it whole (`groups_matching`, `group_at`)."""

    step: int
    kind: str
    group: int
    prompt_id: int
    domain: str
    prompt: str
    completions: tuple[Completion, ...]

    @property
    def n_passed(self) -> int:
        return sum(c.passed for c in self.completions)

    @property
    def label(self) -> str:
        dom = f" · {self.domain}" if self.domain else ""
        return (f"step {self.step} · {self.kind} · prompt {self.prompt_id}{dom} · "
                f"{self.n_passed}/{len(self.completions)} passed")  # fmt: skip


@dataclass(frozen=True)
class PromptPair:
    """One validation prompt's completions at two evaluations; `change`: passes in b minus in a."""

    prompt_id: int
    prompt: str
    a: tuple[Completion, ...]
    b: tuple[Completion, ...]
    change: int


@dataclass(frozen=True)
class SideBySide:
    """Two evaluations' validation completions for the prompts both kept, biggest change first."""

    label_a: str
    label_b: str
    pairs: tuple[PromptPair, ...]

    @property
    def gained(self) -> int:
        return sum(p.change > 0 for p in self.pairs)

    @property
    def lost(self) -> int:
        return sum(p.change < 0 for p in self.pairs)


@dataclass(frozen=True)
class EvalPoint:
    """One point of the curve: an evaluation, and whether its validation completions were kept."""

    step: int
    compute: float
    pass_rate: float
    has_samples: bool

    @property
    def label(self) -> str:
        kept = "" if self.has_samples else " (no samples kept)"
        return f"step {self.step} · pass rate {self.pass_rate:.3f} · compute {self.compute:.3g}{kept}"


@dataclass
class SampleFrame:
    """A run's kept samples read once, re-read only when the files change (`fresh`)."""

    df: pd.DataFrame
    key: tuple = field(default=())

    @staticmethod
    def files_key(run_dir: Any) -> tuple:
        from workbench.runs.samples import step_files

        return tuple((p.name, p.stat().st_mtime_ns) for ps in step_files(run_dir).values() for p in ps)

    @classmethod
    def read(cls, view: Any) -> "SampleFrame":
        from workbench.runs.samples import read_samples

        return cls(read_samples(view.out_dir), cls.files_key(view.out_dir))

    def fresh(self, view: Any) -> "SampleFrame":
        """This frame, or a new one when a step was written or thinned since (this one still, when
        a file went away while being read: the run thinned its folder; the next poll reads it)."""
        try:
            return self if self.files_key(view.out_dir) == self.key else SampleFrame.read(view)
        except FileNotFoundError:
            return self


def filter_samples(df: pd.DataFrame, q: SampleQuery) -> pd.DataFrame:
    """The samples `q` selects (workbench.runs.samples.filter_frame), newest step first."""
    from workbench.runs.samples import filter_frame

    out = filter_frame(df, steps=q.steps, passed=q.passed, domain=q.domain or None, contains=q.text or None, kind=q.kind)
    return out.sort_values(["step", "kind", "group"], ascending=[False, True, True], kind="stable").reset_index(drop=True)


def _num(v: Any) -> Optional[float]:
    return float(v) if v is not None and not (isinstance(v, float) and math.isnan(v)) else None


def shown_text(r: Any) -> str:
    """What a sample shows as its completion: an environment's episode turn by turn (its `turns`
    column: a "── role ──" line before each assistant turn, tool result or environment message),
    else the completion text. The terminal's and the dashboard's one rule."""
    raw = r.get("turns") if hasattr(r, "get") else None
    if isinstance(raw, str) and raw:
        try:
            turns = json.loads(raw)
        except ValueError:
            turns = None
        if isinstance(turns, list) and turns:
            return "\n".join(f"── {t.get('role', '?')} ──\n{t.get('text', '')}" for t in turns)
    return str(r["completion"])


def completion(r: pd.Series) -> Completion:
    """A sample's row as a Completion (the `reward/<fn>` columns into `rewards`)."""
    stale = _num(r.get("staleness"))
    trained = r.get("trained") if r.get("kind") == "train" else None
    trained = bool(trained) if trained is not None and not pd.isna(trained) else None
    rewards = {str(k).split("/", 1)[1]: float(v) for k, v in r.items() if str(k).startswith("reward/") and _num(v) is not None}
    return Completion(text=shown_text(r), passed=bool(r["passed"]), verdict=str(r["verdict"]), reward=float(r["reward"]),
                      advantage=_num(r.get("advantage")), rewards=rewards, version=int(r["version"]),
                      staleness=int(stale) if stale is not None else None, length=int(r["length"]),
                      truncated=bool(r["truncated"]), interrupted=bool(r["interrupted"]), trained=trained,
                      loss_weight=_num(r.get("loss_weight")) if trained else None)  # fmt: skip


def _group(key: tuple, g: pd.DataFrame) -> Group:
    first = g.iloc[0]
    return Group(step=int(key[0]), kind=str(key[1]), group=int(key[2]), prompt_id=int(first["prompt_id"]),
                 domain=str(first["domain"] or ""), prompt=str(first["prompt"]),
                 completions=tuple(completion(r) for _, r in g.iterrows()))  # fmt: skip


def groups(df: pd.DataFrame) -> list[Group]:
    """The samples of `df` by prompt: one Group per (step, kind, group), newest step first."""
    if df.empty:
        return []
    parts = df.groupby(["step", "kind", "group"], sort=False)
    return sorted((_group(k, g) for k, g in parts), key=lambda g: (-g.step, g.kind, g.group))


def groups_matching(df: pd.DataFrame, rows: pd.DataFrame) -> list[Group]:
    """The whole groups of `df` (all their completions) that have a row in `rows` (filtered from
    `df`): a filter picks the groups, the group view shows each one entire."""
    keys = ["step", "kind", "group"]
    if rows.empty:
        return []
    picked = pd.MultiIndex.from_frame(rows[keys].drop_duplicates())
    return groups(df[pd.MultiIndex.from_frame(df[keys]).isin(picked)])


def group_at(df: pd.DataFrame, step: int, kind: str, group: int) -> Group:
    """One prompt's completions at `step` (all of them, whatever the table's filters)."""
    g = df[(df["step"] == step) & (df["kind"] == kind) & (df["group"] == group)]
    if g.empty:
        raise UserError(f"no {kind} group {group} kept at step {step}")
    return _group((step, kind, group), g)


def val_steps(df: pd.DataFrame) -> list[int]:
    """The evaluations whose validation completions were kept, ascending."""
    return sorted({int(s) for s in df.loc[df["kind"] == "val", "step"]}) if not df.empty else []


def side_by_side(df_a: pd.DataFrame, step_a: int, df_b: pd.DataFrame, step_b: int, *, label_a: str = "",
                 label_b: str = "", only: Optional[set[int]] = None) -> SideBySide:  # fmt: skip
    """Evaluation `step_a` of one run's samples beside `step_b` of another's (or the same run's):
    the prompts both kept (of `only`'s prompt ids, when given), the biggest change in passes first
    (workbench.runs.samples.prompt_changes)."""
    from workbench.runs.samples import prompt_changes, steps_text

    for df, step in ((df_a, step_a), (df_b, step_b)):
        if step not in val_steps(df):
            raise UserError(f"no validation samples kept at step {step}; evaluations kept: {steps_text(val_steps(df))}")
    da = df_a[(df_a["kind"] == "val") & (df_a["step"] == step_a)]
    db = df_b[(df_b["kind"] == "val") & (df_b["step"] == step_b)]
    by_a, by_b = dict(list(da.groupby("prompt_id"))), dict(list(db.groupby("prompt_id")))
    pairs = tuple(PromptPair(prompt_id=p, prompt=str(by_a[p].iloc[0]["prompt"]),
                             a=tuple(completion(r) for _, r in by_a[p].iterrows()),
                             b=tuple(completion(r) for _, r in by_b[p].iterrows()), change=c)
                  for p, c in prompt_changes(da, db).items() if only is None or p in only)  # fmt: skip
    return SideBySide(label_a or f"step {step_a}", label_b or f"step {step_b}", pairs)


def eval_points(view: Any, df: pd.DataFrame) -> list[EvalPoint]:
    """The curve's evaluations (the chart's points), each with whether its samples were kept."""
    kept = set(val_steps(df))
    curve = view.curve
    return [EvalPoint(step=int(r["step"]), compute=float(r[view.column]), pass_rate=float(r["val_pass_rate"]),
                      has_samples=int(r["step"]) in kept) for _, r in curve.iterrows()]  # fmt: skip


def health_flags(view: Any) -> list[HealthFlag]:
    """The run's health flags: summary.json's `health` once the engine wrote it, else the same
    rules (workbench.runs.health.check_health) over the rows so far (a live run)."""
    summary = view.summary or {}
    if "health" in summary:
        return [HealthFlag.from_dict(f) for f in summary["health"] or []]
    return check_health(view.rows, getattr(view.cfg, "health", None), run=str(view.out_dir))


def nearest_step(steps: list[int], step: int) -> Optional[int]:
    """The kept step closest to `step` (the earlier on a tie): a flag's step may have been thinned."""
    return min(steps, key=lambda s: (abs(s - step), s)) if steps else None
