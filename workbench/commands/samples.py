"""`workbench samples`: read the completions a run kept (<run>/samples/) in the terminal.

    workbench samples runs/quickstart                     # the newest step's kept samples
    workbench samples runs/quickstart --step 20 --failed  # one step's failing completions
    workbench samples runs/quickstart --contains "def "   # text in the prompt or completion
    workbench samples runs/quickstart --diff 0 20         # the same validation prompts, two evaluations

Samples print grouped by prompt: the prompt once (as the model saw it: the system turn and chat
template included), its passes over the whole group (whatever the filters leave out), then each
completion with its verdict, reward, the advantage and loss weight the trainer trained it with
(or "not trained": dropped by the zero-variance filter or as stale), the policy version that
sampled it, its staleness and length. A long completion is folded to its first and last lines
(--lines; --full shows it whole). The files and their columns are workbench.runs.samples'.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

import pandas as pd

from workbench.errors import UserError
from workbench.widgets.samples_data import fold_text, shown_text


def add_parser(subparsers: Any, name: str) -> argparse.ArgumentParser:
    p = subparsers.add_parser(name, help="print the completions a run kept (<run>/samples/)",
                              description=__doc__.split("\n\n")[0],
                              epilog="examples:\n  workbench samples runs/quickstart --failed\n"
                                     "  workbench samples runs/quickstart --step 20 --val\n"
                                     "  workbench samples runs/quickstart --diff 0 20",
                              formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("run", metavar="RUN", help="the run folder (holds samples/)")
    p.add_argument("--step", type=int, help="this step only (default: the newest step; with a filter, every step, newest first)")
    p.add_argument("--failed", action="store_true", help="failing completions only")
    p.add_argument("--passed", action="store_true", help="passing completions only")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--train", action="store_true", help="the training groups only")
    kind.add_argument("--val", action="store_true", help="the validation completions only")
    p.add_argument("--domain", help="a task mixture's domain only")
    p.add_argument("--contains", metavar="TEXT", help="samples with TEXT in the prompt or completion (any step)")
    p.add_argument("--diff", nargs=2, type=int, metavar=("STEP_A", "STEP_B"),
                   help="the validation completions of the same prompts at two evaluations")
    p.add_argument("--limit", type=int, default=8, help="prompts shown at most (default 8)")
    p.add_argument("--lines", type=int, default=8, help="a completion folded past this many lines (default 8)")
    p.add_argument("--full", action="store_true", help="never fold a completion")
    return p


def run(args: argparse.Namespace) -> int:
    from workbench.runs.samples import filter_frame, read_samples, step_files, steps_text

    run_dir = Path(args.run)
    if not run_dir.is_dir():
        raise UserError(f"no run folder {run_dir}")
    steps = list(step_files(run_dir))
    if not steps:
        raise UserError(f"no samples in {run_dir / 'samples'} (the run kept none: samples.max_mb = 0, or it predates them)")
    if args.failed and args.passed:
        raise UserError("--failed and --passed exclude each other")
    fold = None if args.full else max(2, args.lines)
    if args.diff:
        print(diff_text(run_dir, *args.diff, limit=args.limit, fold=fold))
        return 0
    filtered = args.failed or args.passed or args.domain or args.contains
    step = args.step if args.step is not None or filtered else steps[-1]  # a filter alone: every step, newest first
    whole = read_samples(run_dir, step=step, kind="train" if args.train else ("val" if args.val else None))
    df = filter_frame(whole, passed=False if args.failed else (True if args.passed else None), domain=args.domain,
                      contains=args.contains)  # fmt: skip
    if df.empty:
        raise UserError(f"no samples match at {'step ' + str(step) if step is not None else 'any step'} "
                        f"(steps kept: {steps_text(steps)})")  # fmt: skip
    print(samples_text(df, limit=args.limit, fold=fold, whole=whole))
    return 0


def _width() -> int:
    return max(60, min(120, shutil.get_terminal_size((100, 24)).columns))


def folded(text: str, fold: int | None, indent: str = "    ") -> str:
    """`text` wrapped to the terminal, its middle left out past `fold` lines (the end stays: an
    answer, or where the token limit cut it)."""
    f = fold_text(text, width=_width() - len(indent), keep=fold)
    lines = f.head + ([f"[... {len(f.hidden)} more lines; --full shows them ...]"] if f.hidden else []) + f.tail
    return "\n".join(indent + line for line in lines)


def _line(r: Any) -> str:
    """One completion's header: verdict, reward, what it was trained with, version, staleness, length, flags."""
    bits = [("PASS" if r["passed"] else "FAIL") + ("" if r["verdict"] in ("pass", "fail") else f" ({r['verdict']})"),
            f"reward {r['reward']:+.2f}"]  # fmt: skip
    bits += [f"{c.split('/', 1)[1]} {r[c]:+.2f}" for c in r.index if str(c).startswith("reward/") and pd.notna(r[c])]
    if pd.notna(r.get("advantage")):
        weight = f" · weight {r['loss_weight']:.3g}" if pd.notna(r.get("loss_weight")) else ""
        bits.append(f"adv {r['advantage']:+.2f}{weight}")
    elif r.get("kind") == "train" and pd.notna(r.get("trained")) and not bool(r.get("trained")):  # older files: no column
        bits.append("not trained")
    stale = f", stale {int(r['staleness'])}" if pd.notna(r.get("staleness")) and r.get("staleness") else ""
    bits += [f"v{int(r['version'])}{stale}", f"{int(r['length'])} tok"]
    bits += [f for f in ("truncated", "interrupted") if r.get(f)]
    return " · ".join(bits)


def samples_text(df: pd.DataFrame, *, limit: int, fold: int | None, whole: pd.DataFrame | None = None) -> str:
    """Samples grouped by (step, kind, group): the prompt once, then its completions. The header's
    passes count the whole group in `whole` (the frame `df` was filtered from; default `df`)."""
    keys = ["step", "kind", "group"]
    counts = (whole if whole is not None else df).groupby(keys)["passed"].agg(["sum", "size"])
    out, shown = [], 0
    groups = sorted(df.groupby(keys), key=lambda kv: (-kv[0][0], kv[0][1], kv[0][2]))
    for (step, kind, group), g in groups:
        if shown == limit:
            out.append(f"... {len(groups) - limit} more prompts (--limit)")
            break
        shown += 1
        first = g.iloc[0]
        domain = f" · {first['domain']}" if first.get("domain") else ""
        passed, size = counts.loc[(step, kind, group)]
        out.append(f"=== step {step} · {kind} · prompt {first['prompt_id']}{domain} · {int(passed)}/{int(size)} passed")
        out.append(folded(first["prompt"], fold, "  "))
        for i, (_, r) in enumerate(g.iterrows()):
            out.append(f"  --- [{i}] {_line(r)}")
            out.append(folded(shown_text(r), fold))
    return "\n".join(out)


def diff_text(run_dir: Path, a: int, b: int, *, limit: int, fold: int | None) -> str:
    """The validation completions of the prompts both evaluations kept, side by side in time:
    prompts whose pass count changed first (the biggest change first)."""
    from workbench.runs.samples import prompt_changes, read_samples, steps_text

    val_steps = sorted(set(read_samples(run_dir, kind="val")["step"].tolist()))
    for s in (a, b):
        if s not in val_steps:
            raise UserError(f"no validation samples at step {s} in {run_dir / 'samples'}; evaluations kept: {steps_text(val_steps)}")
    da, db = (read_samples(run_dir, step=s, kind="val") for s in (a, b))
    change = prompt_changes(da, db)
    if not change:
        raise UserError(f"the evaluations at steps {a} and {b} kept no prompt in common (samples.val_cap too small?)")
    common = order = list(change)
    gained, lost = sum(v > 0 for v in change.values()), sum(v < 0 for v in change.values())
    out = [f"validation, step {a} -> step {b}: {len(common)} prompts in both; {gained} pass more often, {lost} less, "
           f"{len(common) - gained - lost} unchanged"]  # fmt: skip
    for p in order[:limit]:
        ga, gb = da[da.prompt_id == p], db[db.prompt_id == p]
        out.append(f"=== prompt {p} · passed {int(ga['passed'].sum())}/{len(ga)} -> {int(gb['passed'].sum())}/{len(gb)}")
        out.append(folded(ga.iloc[0]["prompt"], fold, "  "))
        for step, g in ((a, ga), (b, gb)):
            for i, (_, r) in enumerate(g.iterrows()):
                out.append(f"  --- step {step} [{i}] {_line(r)}")
                out.append(folded(shown_text(r), fold))
    if len(order) > limit:
        out.append(f"... {len(order) - limit} more prompts (--limit)")
    return "\n".join(out)
