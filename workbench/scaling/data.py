"""Training curves as data: validation of compute/score arrays and CSV loading.

A curve is validation score (a pass rate in [0, 1]) against cumulative training compute in any
unit (GPU-hours, FLOPs, steps). Every fit in `workbench.scaling` goes through `check_curve`, so
bad input fails early with a `UserError` that names the problem instead of a numerical error
deep inside an optimiser. Where a curve starts (R0, fixed in every fit, never fitted) is decided
here too: `resolve_r0` for one fit, `r0_rule` for curves read from runs (one rule for reports,
comparisons, history priors and the forecast scoreboard).

    curve = Curve.from_csv("examples/curves/qwen2.5-0.5b-instruct_gsm8k_ppo__val.csv")
    curve.compute, curve.score          # float arrays, validated
    Curve.from_csv(path, x="step", y="val_pass_rate")
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from workbench.errors import UserError

# Column names tried, in order, when the caller does not name the x / y column.
X_CANDIDATES = ("gpu_hours_est", "gpu_hours", "compute", "flops", "gpu_hours_total", "step", "steps")
Y_CANDIDATES = ("val_pass_rate", "pass_rate", "val_score", "score", "accuracy", "val_reward", "train_reward_mean", "metric")
RANGES_FILE = "ranges.csv"  # beside curve CSVs: file,lo,hi for scores not bounded to [0, 1]
MIN_POINTS = 4  # fewest fitted points for any fit (sessions, reports and sweeps import this one)
"""The fewest fitted points any fit accepts."""


def _first_bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def check_curve(compute: Any, score: Any, *, what: str = "curve", score_label: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Return (compute, score) as float arrays, or raise UserError naming what is wrong
    (`score_label`: the score's column, named when a score is out of range).

    Rules: 1-D, equal length, at least 2 points, finite, compute >= 0, strictly increasing
    compute (no duplicates), scores in [0, 1] and not all equal.
    """
    try:
        c = np.asarray(compute, dtype=float)
        s = np.asarray(score, dtype=float)
    except (TypeError, ValueError) as e:
        raise UserError(f"{what}: compute and score must be numbers ({e})") from None
    if c.ndim != 1 or s.ndim != 1:
        raise UserError(f"{what}: compute and score must be 1-D sequences (got shapes {c.shape} and {s.shape})")
    if len(c) != len(s):
        raise UserError(f"{what}: compute has {len(c)} values but score has {len(s)}")
    if len(c) < 2:
        raise UserError(f"{what}: needs at least 2 points, got {len(c)}")
    for name, arr in (("compute", c), ("score", s)):
        bad = ~np.isfinite(arr)
        if bad.any():
            i = _first_bad(bad)
            raise UserError(f"{what}: {name} has {int(bad.sum())} NaN/inf value(s), first at index {i} ({arr[i]})")
    if (c < 0).any():
        i = _first_bad(c < 0)
        raise UserError(f"{what}: compute must be >= 0; index {i} has {c[i]:g}")
    step = np.diff(c)
    if (step == 0).any():
        i = _first_bad(step == 0) + 1
        raise UserError(f"{what}: duplicate compute value {c[i]:g} at indices {i - 1} and {i}")
    if (step < 0).any():
        i = _first_bad(step < 0) + 1
        raise UserError(f"{what}: compute must be sorted increasing; index {i} ({c[i]:g}) comes after {c[i - 1]:g}")
    if ((s < 0) | (s > 1)).any():
        i = _first_bad((s < 0) | (s > 1))
        where = f"the score column {score_label!r}" if score_label else "the score"
        raise UserError(f"{what}: {where} has {s[i]:g}, outside [0, 1] (point {i}): scores must be in [0, 1] (a pass rate); "
                        "for another score give its range (--y-range LO HI, y_range=, or a ranges.csv beside the file)")
    if np.ptp(s) == 0:
        raise UserError(f"{what}: score is constant ({s[0]:g}) - there is no curve to fit")
    return c, s


@dataclass(frozen=True)
class Curve:
    """One validated training curve: score against compute."""

    compute: np.ndarray
    score: np.ndarray
    name: str = "curve"
    x_label: str = "compute"
    y_label: str = "score"

    def __post_init__(self) -> None:
        c, s = check_curve(self.compute, self.score, what=self.name, score_label=self.y_label)
        object.__setattr__(self, "compute", c)
        object.__setattr__(self, "score", s)

    def __len__(self) -> int:
        return len(self.compute)

    def until(self, limit: float) -> "Curve":
        """The prefix with compute <= limit (for backtests)."""
        keep = self.compute <= limit
        return Curve(self.compute[keep], self.score[keep], self.name, self.x_label, self.y_label)

    @classmethod
    def from_csv(cls, path: str | Path, x: str | None = None, y: str | None = None, y_range: tuple[float, float] | None = None) -> "Curve":
        """Load a curve from a CSV with a header row; x / y name columns (guessed when None).

        y_range=(lo, hi): the score's possible range when it is not a pass rate in [0, 1] (a summed
        reward, say); scores are mapped to (y - lo) / (hi - lo) and the label says so. Without it,
        the range comes from a `ranges.csv` beside the file (columns file, lo, hi) when that lists it.
        """
        path = Path(path)
        if not path.is_file():
            raise UserError(f"curve file not found: {path}")
        try:  # utf-8-sig: a spreadsheet's export starts with a byte-order mark
            with path.open(newline="", encoding="utf-8-sig") as f:
                rows = list(csv.reader(f))
        except UnicodeDecodeError as e:
            raise UserError(f"{path}: not a UTF-8 text CSV ({e.reason} at byte {e.start})") from None
        except csv.Error as e:
            raise UserError(f"{path}: not a readable CSV ({e})") from None
        rows = [r for r in rows if any(cell.strip() for cell in r)]
        if len(rows) < 2:
            raise UserError(f"{path}: needs a header row and at least one data row")
        header = [h.strip() for h in rows[0]]
        xcol = _pick_column(header, x, X_CANDIDATES, "compute", "--x", path)
        ycol = _pick_column(header, y, Y_CANDIDATES, "score", "--y", path)
        if xcol == ycol:
            raise UserError(f"{path}: x and y are the same column {header[xcol]!r}")
        xs, ys = [], []
        for line, row in enumerate(rows[1:], start=2):
            xs.append(_number(row, xcol, header, path, line))
            ys.append(_number(row, ycol, header, path, line))
        y_arr, y_label = np.array(ys), header[ycol]
        y_range = y_range if y_range is not None else score_range(path)
        if y_range is not None:
            lo, hi = (float(v) for v in y_range)
            if not (math.isfinite(lo) and math.isfinite(hi) and hi > lo):
                raise UserError(f"{path}: score range must be two numbers lo < hi, got {y_range}")
            y_arr, y_label = (y_arr - lo) / (hi - lo), f"{y_label} scaled from [{lo:g}, {hi:g}]"
        return cls(np.array(xs), y_arr, name=path.stem, x_label=header[xcol], y_label=y_label)


def score_range(path: Path) -> tuple[float, float] | None:
    """The (lo, hi) that a ranges.csv beside `path` lists for it, else None."""
    table = path.parent / RANGES_FILE
    if not table.is_file():
        return None
    with table.open(newline="") as f:
        for row in csv.DictReader(f):
            if row.get("file", "").strip() == path.name:
                try:
                    return float(row["lo"]), float(row["hi"])
                except (KeyError, TypeError, ValueError):
                    raise UserError(f"{table}: row for {path.name} needs numeric lo and hi columns") from None
    return None


def _pick_column(header: list[str], wanted: str | None, candidates: Sequence[str], role: str, flag: str, path: Path) -> int:
    if wanted is not None:
        if wanted not in header:
            raise UserError(f"{path}: unknown column {wanted!r} for {role} (columns: {', '.join(header)})")
        return header.index(wanted)
    for name in candidates:
        if name in header:
            return header.index(name)
    if len(header) == 2:  # a bare two-column file: compute, score
        return 0 if role == "compute" else 1
    raise UserError(f"{path}: cannot tell which column is the {role}; pass {flag} (columns: {', '.join(header)})")


def _number(row: list[str], col: int, header: list[str], path: Path, line: int) -> float:
    if col >= len(row) or not row[col].strip():
        raise UserError(f"{path}:{line}: column {header[col]!r} is empty")
    try:
        return float(row[col])
    except ValueError:
        raise UserError(f"{path}:{line}: column {header[col]!r} is not a number: {row[col]!r}") from None


def as_curve(obj: Any, name: str = "curve") -> Curve:
    """Accept a Curve, a (compute, score) pair, or a mapping/DataFrame with compute & score keys."""
    if isinstance(obj, Curve):
        return obj
    if isinstance(obj, tuple) and len(obj) == 2:
        return Curve(obj[0], obj[1], name=name)
    if hasattr(obj, "keys"):
        keys = list(obj.keys())
        xk = next((k for k in X_CANDIDATES if k in keys), None)
        yk = next((k for k in Y_CANDIDATES if k in keys), None)
        if xk and yk:
            return Curve(np.asarray(obj[xk]), np.asarray(obj[yk]), name=name, x_label=xk, y_label=yk)
        raise UserError(f"{name}: cannot find compute/score columns among {keys}")
    raise UserError(f"{name}: expected a Curve or a (compute, score) pair, got {type(obj).__name__}")


def r0_rule(curves: Sequence[tuple[Any, Any]]) -> str | None:
    """The `r0` of curves read from runs (the one R0 rule: reports, run comparisons, history
    priors, the forecast scoreboard): None (the score measured at compute 0) when every curve has
    a point at compute 0, else "first" (each curve's first point: a resumed run, a curve whose
    step 0 was not logged)."""
    return None if all((np.asarray(c) == 0).any() for c, _ in curves) else "first"


def resolve_r0(r0: float | str | None, curves: list[Curve]) -> tuple[float, str]:
    """(R0, its source) for a fit: the given score, the first points' mean ("first"), or the mean
    score measured at compute 0 ("measured"); one UserError line for a bad `r0` or no such point."""
    if isinstance(r0, str):
        if r0 != "first":
            raise UserError(f"r0 must be a number, None or 'first', not {r0!r}")
        return float(np.mean([c.score[0] for c in curves])), "first"
    if r0 is not None:
        if not (math.isfinite(r0) and 0 <= r0 <= 1):
            raise UserError(f"r0 must be a score in [0, 1], got {r0}")
        return float(r0), "given"
    at0 = [c.score[0] for c in curves if c.compute[0] == 0]
    if not at0:
        raise UserError(
            "no point at compute 0 to measure R0 from: pass r0=<score before training> (--r0 in the CLI) "
            "(or r0='first' to use the first point's score)"
        )
    return float(np.mean(at0)), "measured"
