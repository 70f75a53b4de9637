"""`workbench samples RUN`: a written samples folder printed, --failed, --diff, folding, one-line errors."""

from __future__ import annotations

import pytest

from workbench.cli import main
from workbench.config import SamplesConfig
from workbench.runs.samples import SampleWriter


def _rec(pid: int, text: str, passed: bool, *, version: int = 0, **kw) -> dict:
    return {"group": pid, "prompt_id": pid, "domain": "", "prompt": f"What is {pid} + {pid}?", "completion": text,
            "passed": passed, "verdict": "pass" if passed else "fail", "reward": 1.0 if passed else -1.0,
            "advantage": kw.get("advantage", float("nan")), "version": version, "version_last": version,
            "staleness": kw.get("staleness", 0), "length": len(text.split()), "truncated": kw.get("truncated", False),
            "interrupted": False}  # fmt: skip


@pytest.fixture
def run_dir(tmp_path):
    w = SampleWriter(tmp_path, SamplesConfig())
    w.write(0, "val", [_rec(1, "3", False), _rec(1, "5", False), _rec(2, "4", True), _rec(2, "4", True)])
    long = "\n".join(f"line {i} of the reasoning" for i in range(40)) + "\nANSWER 9"
    w.write(5, "train", [_rec(7, "14", True, version=4, advantage=0.5, staleness=1), _rec(7, "14", True, version=4),
                         _rec(8, long, False, version=3, advantage=-0.5, truncated=True), _rec(8, "no", False, version=3)])
    w.write(10, "val", [_rec(1, "2", True, version=10), _rec(1, "2", True, version=10),
                        _rec(2, "4", True, version=10), _rec(2, "five", False, version=10)])  # fmt: skip
    return tmp_path


def test_failed_prints_the_failing_completions_with_their_facts_folded(run_dir, capsys):
    assert main(["samples", str(run_dir), "--step", "5", "--failed"]) == 0
    out = capsys.readouterr().out
    assert "=== step 5 · train · prompt 8 · 0/2 passed" in out and "What is 8 + 8?" in out
    assert "prompt 7" not in out  # the passing group is left out
    assert "FAIL · reward -1.00 · adv -0.50 · v3" in out and "truncated" in out
    assert "line 0 of the reasoning" in out and "ANSWER 9" in out  # the head and the end of a long completion
    assert "line 20 of the reasoning" not in out and "more lines; --full shows them" in out
    assert main(["samples", str(run_dir), "--step", "5", "--failed", "--full"]) == 0
    assert "line 20 of the reasoning" in capsys.readouterr().out


def test_default_is_the_newest_step_and_failed_alone_searches_every_step(run_dir, capsys):
    assert main(["samples", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "=== step 10 · val" in out and "step 5" not in out
    assert main(["samples", str(run_dir), "--failed"]) == 0
    out = capsys.readouterr().out
    assert out.index("step 10 · val · prompt 2") < out.index("step 5 · train · prompt 8") < out.index("step 0 · val · prompt 1")


def test_diff_shows_the_same_validation_prompt_at_two_evaluations(run_dir, capsys):
    assert main(["samples", str(run_dir), "--diff", "0", "10"]) == 0
    out = capsys.readouterr().out
    assert "2 prompts in both; 1 pass more often, 1 less, 0 unchanged" in out
    assert "=== prompt 1 · passed 0/2 -> 2/2" in out and "=== prompt 2 · passed 2/2 -> 1/2" in out
    p1 = out[out.index("=== prompt 1") : out.index("=== prompt 2")]
    assert p1.index("--- step 0 [0] FAIL") < p1.index("--- step 10 [0] PASS")
    assert "    five" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--step", "7"], "no samples at step 7 in .*; steps kept: 0, 5, 10"),
        (["--diff", "0", "5"], "no validation samples at step 5 .*evaluations kept: 0, 10"),
        (["--step", "10", "--domain", "code"], "no samples match at step 10 \\(steps kept: 0, 5, 10\\)"),
    ],
)
def test_bad_requests_are_one_line_errors(run_dir, capsys, argv, message):
    import re

    assert main(["samples", str(run_dir), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(message, err), err


def test_a_run_without_samples_says_so(tmp_path, capsys):
    assert main(["samples", str(tmp_path)]) == 2
    assert "no samples in" in capsys.readouterr().err
    assert main(["samples", str(tmp_path / "missing")]) == 2
    assert "no run folder" in capsys.readouterr().err


def test_group_headers_count_the_whole_group_and_lines_say_what_was_trained(tmp_path, capsys):
    """--failed shows a group's failures under its whole count (1/4 passed, not 0/3); each training
    completion says the advantage and loss weight the trainer trained it with, or "not trained"."""
    w = SampleWriter(tmp_path, SamplesConfig())
    one = [_rec(3, "6", True, advantage=1.5), *(_rec(3, "7", False, advantage=-0.5) for _ in range(3))]
    same = [_rec(4, "8", True) for _ in range(4)]  # zero variance: the trainer left it out
    w.write(2, "train", [{**r, "trained": True, "loss_weight": 0.125} for r in one] +
            [{**r, "trained": False, "loss_weight": 0.0} for r in same])  # fmt: skip
    assert main(["samples", str(tmp_path), "--step", "2", "--failed"]) == 0
    out = capsys.readouterr().out
    assert "=== step 2 · train · prompt 3 · 1/4 passed" in out and out.count("--- [") == 3
    assert "FAIL · reward -1.00 · adv -0.50 · weight 0.125 · v0" in out
    assert main(["samples", str(tmp_path), "--step", "2", "--contains", "8"]) == 0
    out = capsys.readouterr().out
    assert "prompt 4 · 4/4 passed" in out and out.count("not trained") == 4 and "adv" not in out
