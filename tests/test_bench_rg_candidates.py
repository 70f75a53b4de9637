"""bench_rg_candidates: every candidate is a run config that loads, and its questions are scorable in
the answer format it asks for (a right reply passes, a wrong one fails), so a step-0 rate that comes
out 0 is the model's, not a malformed candidate's."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("reasoning_gym")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_rg_candidates as rg  # noqa: E402

from workbench.config import run_config_from_dict  # noqa: E402
from workbench.tasks.base import check_batch, load_task  # noqa: E402


def _reply(fmt: str, answer: str) -> str:
    return f"<answer>{answer}</answer>" if fmt == "answer_tag" else f"So it is {answer}"


@pytest.mark.parametrize("c", rg.CANDIDATES, ids=lambda c: c.label)
def test_each_candidate_loads_and_scores_in_its_own_format(c):
    base = yaml.safe_load(rg.BASE.read_text())
    cfg = run_config_from_dict(rg.candidate_settings(base, c, 8))
    assert (cfg.task.dataset or cfg.task.name) == c.dataset and cfg.generation.max_new_tokens == c.max_new_tokens
    task = load_task(dataclasses.replace(cfg.task, num_train=8))
    assert len(task.val) == 8
    ex = task.val[0]
    wrong = "zzz" if c.answer_format == "answer_tag" else "123456789"
    verdicts = check_batch(task, [_reply(c.answer_format, ex.answer), _reply(c.answer_format, wrong)], [ex, ex])
    assert [v.verdict for v in verdicts] == ["pass", "fail"], (c.label, ex.prompt, ex.answer)


def test_labels_are_unique_and_the_band_is_the_issues():
    assert len({c.label for c in rg.CANDIDATES}) == len(rg.CANDIDATES)
    assert rg.in_band(0.05) and rg.in_band(0.30) and not rg.in_band(0.04) and not rg.in_band(0.31)


def test_a_config_written_for_a_candidate_is_a_run_config(tmp_path):
    base = yaml.safe_load(rg.BASE.read_text())
    c = rg.CANDIDATES[0]
    path = rg.write_config(tmp_path, rg.candidate_settings(base, c, 16), c.label)
    cfg = run_config_from_dict(yaml.safe_load(path.read_text()))
    assert cfg.name == f"smollm2-rg-{c.label}" and cfg.task.num_val == 16 and cfg.model.path == base["model"]["path"]


def test_a_candidate_with_too_few_distinct_questions_is_refused_with_its_reason(tmp_path):
    base = yaml.safe_load(rg.BASE.read_text())
    small = rg.Candidate("tiny", "chain_sum", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1})
    why = rg.refusal(rg.write_config(tmp_path, rg.candidate_settings(base, small, 64), small.label))
    assert "validation questions differ from the training ones" in why  # 100 questions, 4,000 asked for
    assert rg.refusal(rg.write_config(tmp_path, rg.candidate_settings(base, rg.CANDIDATES[1], 64), "ok")) == ""
    assert rg.line({"label": "tiny", "refused": why}).startswith("tiny") and "refused" in rg.line({"label": "tiny", "refused": why})


def test_a_rerun_keeps_the_scored_candidates_and_tries_the_refused_again(tmp_path):
    rows = [{"label": "a", "pass_rate": 0.1}, {"label": "b", "refused": "too few questions"}, {"label": "a", "pass_rate": 0.2}]
    (tmp_path / "candidates.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert rg.scored(tmp_path) == {"a": {"label": "a", "pass_rate": 0.2}}
    assert rg.scored(tmp_path / "none") == {}
