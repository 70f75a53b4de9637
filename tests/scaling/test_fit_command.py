"""`workbench fit` end to end, in a subprocess (workbench/scaling/fit_command.py)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .synthetic import GEMMA_TRAIN, QWEN_VAL, curve_path

ROOT = Path(__file__).resolve().parents[2]


def _workbench() -> list[str]:
    exe = ROOT / ".venv" / "bin" / "workbench"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("workbench")
    return [found] if found else [sys.executable, "-m", "workbench.cli"]


def wb(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*_workbench(), "fit", *args], capture_output=True, text=True, timeout=300)


def test_text_output_has_parameters_intervals_and_forecasts():
    p = wb(str(curve_path(QWEN_VAL)), "--n-boot", "50")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    for word in ("A     =", "B     =", "C_mid =", "95% CI", "R^2", "forecast at 2x", "forecast at 10x"):
        assert word in out
    assert "(10x the compute seen" in out and "\n  10x more compute: " in out


def test_the_demo_curve_is_not_sold_past_its_ceiling():
    """The CPU demo's curve: the 10x band reaches the task's ceiling (0.512), and the verdict spans both families."""
    p = wb(str(ROOT / "examples" / "curves" / "demo" / "seed0.csv"), "--x", "compute", "--y", "val_pass_rate", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["forecast"]["10x"]["lo"] <= 0.512 and d["forecast"]["10x"]["horizon"].startswith("10x the compute seen; backtested only to")
    assert "over both curve families" in d["verdict_10x"] and d["ceiling_check"]["family_dependent"]


def test_json_with_until_is_a_backtest(tmp_path):
    p = wb(str(curve_path(QWEN_VAL)), "--x", "gpu_hours_est", "--y", "val_pass_rate", "--until", "4.3", "--json", "--n-boot", "50")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert {"A", "B", "C_mid", "R0", "A_ci", "B_ci", "C_mid_ci", "r2", "backtest_rmse"} <= set(d)
    assert d["A_ci"][0] <= d["A"] <= d["A_ci"][1] and d["n"] == 21 and d["backtest_n"] == 22
    assert 0 < d["backtest_rmse"] < 0.05
    assert d["forecast"]["10x"]["compute"] == pytest.approx(10 * d["last_compute"])


def test_fit_from_r0_and_plot(tmp_path):
    out = tmp_path / "fit.html"
    p = wb(str(curve_path(GEMMA_TRAIN)), "--r0", "first", "--fit-from", "1.0", "--plot", str(out), "--json", "--n-boot", "50")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["r0_source"] == "first" and d["plot"] == str(out)
    assert out.stat().st_size > 10_000 and "<script" in out.read_text()


def _subst(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("gpu_hours,score\n0,0.1\n1,nan\n2,0.3\n3,0.4\n4,0.5\n")
    (tmp_path / "binary.csv").write_bytes(b"\xff\xfe\x00a,b\n")
    (tmp_path / "reward.csv").write_text("gpu_hours,reward\n0,0.1\n1,2.5\n2,3\n3,3.5\n4,4\n")
    return {"binary": str(tmp_path / "binary.csv"), "reward": str(tmp_path / "reward.csv"),"qwen": str(curve_path(QWEN_VAL)), "missing": str(tmp_path / "none.csv"), "gemma_train": str(curve_path(GEMMA_TRAIN)), "bad": str(bad)}


@pytest.mark.parametrize(
    "args, fragment",
    [(["{qwen}", "--y", "nope"], "unknown column 'nope'"), (["{gemma_train}"], "no point at compute 0")],
)
def test_user_errors_exit_2_with_one_line_and_no_traceback(tmp_path, args, fragment):
    p = wb(*[a.format(**_subst(tmp_path)) for a in args], "--n-boot", "0")
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("workbench fit: error:") and fragment in lines[0]
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["{missing}"], "not found"),
        (["{qwen}", "--fit-from", "100"], "at least 4"),
        (["{qwen}", "--until", "100"], "no points after it"),
        (["{qwen}", "--plot", "out.pdf"], "--plot"),
        (["{bad}"], "NaN"),
        (["{qwen}", "--n-boot", "5"], "n_boot"),
        (["{binary}"], "not a UTF-8 text CSV"),
        (["{reward}"], "the score column 'reward' has 2.5, outside [0, 1]"),
        (["{reward}"], "--y-range LO HI"),
        (["{qwen}", "--until", "-5"], "--until is a compute, >= 0"),
    ],
)
def test_more_user_errors_through_the_dispatcher(tmp_path, capsys, args, fragment):
    # Same path as the shell (workbench.cli.main), in-process to spare a Python start per case.
    from workbench.cli import main

    argv = ["fit", *[a.format(**_subst(tmp_path)) for a in args]]
    if "--n-boot" not in argv:
        argv += ["--n-boot", "0"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("workbench fit: error:") and fragment in err[0]


def test_argparse_errors_exit_2():
    p = wb(str(curve_path(QWEN_VAL)), "--r0", "abc")
    assert p.returncode == 2 and "must be a number or 'first'" in p.stderr


def test_flat_curve_says_no_gain_in_text_and_json(tmp_path):
    import numpy as np

    rng = np.random.default_rng(2)
    path = tmp_path / "flat.csv"
    rows = ["gpu_hours,val_pass_rate", "0,0.51"] + [f"{c:.4f},{0.51 + e:.4f}" for c, e in zip(np.geomspace(0.1, 8, 30), rng.normal(0, 0.02, 30))]
    path.write_text("\n".join(rows) + "\n")
    p = wb(str(path), "--until", "4", "--n-boot", "50")
    assert p.returncode == 0, p.stderr
    assert "NO GAIN DETECTED" in p.stdout and "forecast (flat: no gain detected) at 10x" in p.stdout
    assert "naive forecasts on the same points" in p.stdout
    p = wb(str(path), "--until", "4", "--n-boot", "50", "--json")
    assert "NaN" not in p.stdout  # strict JSON
    d = json.loads(p.stdout)
    assert d["no_gain"] is True and d["reason"].startswith("no gain detected") and d["B"] == d["C_mid"] == "nan"
    assert d["forecast"]["10x"]["score"] == pytest.approx(d["A"]) and d["forecast"]["10x"]["lo"] < d["A"] < d["forecast"]["10x"]["hi"]
    assert d["backtest_rmse"] <= min(d["backtest_naive_last_rmse"], d["backtest_naive_mean_rmse"]) + 0.02


def test_json_names_the_forecast_used_and_scores_the_paper_beside_the_naive_ones():
    p = wb(str(curve_path(QWEN_VAL)), "--until-fraction", "0.5", "--json", "--n-boot", "50")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["method"] == "auto" and "rolling-origin" in out["forecast_used"]
    assert abs(sum(out["forecast_weights"].values()) - 1) < 1e-9
    assert out["backtest_until"] > 0 and out["backtest_n"] > 0
    for k in ("backtest_rmse", "backtest_paper_rmse", "backtest_naive_last_rmse", "backtest_naive_mean_rmse"):
        assert isinstance(out[k], float), k
    paper = json.loads(wb(str(curve_path(QWEN_VAL)), "--until-fraction", "0.5", "--json", "--n-boot", "0", "--method", "paper").stdout)
    assert paper["method"] == "paper" and "paper's procedure" in paper["forecast_used"] and paper["forecast_weights"] is None


def test_batch_backtest_over_a_folder_prints_the_table_and_summary(tmp_path):
    for name in (QWEN_VAL, GEMMA_TRAIN):
        shutil.copy(curve_path(name), tmp_path / name)
    # a summed reward in [-1, 4], scaled by the folder's ranges.csv
    (tmp_path / "reward.csv").write_text("step,metric\n" + "".join(f"{i},{-1 + 5 * (0.2 + 0.5 * i / (i + 20)):.4f}\n" for i in range(1, 80)))
    (tmp_path / "ranges.csv").write_text("file,lo,hi,why\nreward.csv,-1,4,test\n")
    p = wb(str(tmp_path), "--until-fraction", "0.25", "0.5", "--n-boot", "30")
    assert p.returncode == 0, p.stderr
    for word in ("workbench", "paper", "last", "mean", "cover95", "prefix 0.25 over 3 curves", "prefix 0.50 over 3 curves", "reward"):
        assert word in p.stdout, word
    j = json.loads(wb(str(tmp_path), "--until-fraction", "0.5", "--n-boot", "0", "--json").stdout)
    assert len(j["rows"]) == 3 and j["summary"][0]["curves"] == 3
    assert all(set(r["rmse"]) == {"workbench", "paper", "last", "mean", "last3"} and r["noise"] > 0 for r in j["rows"])
    assert j["summary"][0]["median_excess_workbench"] >= 0 and "excess_gain_vs_better_of_paper_and_last3" in j["summary"][0]
    # every curve counts in the mean log-ratio against the paper, not only the median one
    ratios = [math.log(r["rmse"]["workbench"] / r["rmse"]["paper"]) for r in j["rows"]]
    assert j["summary"][0]["mean_log_ratio_vs_paper"] == pytest.approx(sum(ratios) / 3)
    assert "mean log(workbench / paper rmse)" in p.stdout
    assert "prefix 0.25 beyond the noise" in p.stdout


def test_a_spreadsheet_export_with_a_byte_order_mark_reads_its_columns(tmp_path):
    bom = tmp_path / "bom.csv"
    bom.write_bytes("\ufeffgpu_hours,pass_rate\n0,0.1\n1,0.2\n2,0.3\n3,0.35\n4,0.4\n".encode("utf-8"))
    d = json.loads(wb(str(bom), "--json", "--n-boot", "0").stdout)
    assert d["x"] == "gpu_hours" and d["n"] == 4


def test_without_bootstrap_the_text_says_so_instead_of_nan():
    p = wb(str(curve_path(QWEN_VAL)), "--n-boot", "0")
    assert p.returncode == 0 and "nan" not in p.stdout
    assert "no interval: fitted without bootstrap" in p.stdout and "no band (--n-boot 0)" in p.stdout


def test_one_unreadable_curve_is_a_row_of_the_batch_not_its_end(tmp_path):
    shutil.copy(curve_path(QWEN_VAL), tmp_path)
    (tmp_path / "broken.csv").write_text("step,score\n1,0.1\n2,abc\n")
    p = wb(str(tmp_path), "--until-fraction", "0.5", "--json", "--n-boot", "0")
    assert p.returncode == 0, p.stderr
    j = json.loads(p.stdout)
    rows = {r["curve"]: r for r in j["rows"]}
    assert "not a number: 'abc'" in rows["broken"]["error"] and rows["broken"]["until"] is None
    assert rows[QWEN_VAL.removesuffix(".csv")]["rmse"]["workbench"] > 0
    assert j["summary"][0]["curves"] == 1 and j["summary"][0]["not_fitted"] == 1


def test_batch_and_range_errors_are_one_line():
    p = wb(str(ROOT / "examples" / "curves"), "--until", "3")
    assert p.returncode == 2 and "batch backtest" in p.stderr and "Traceback" not in p.stderr
    p = wb(str(curve_path(QWEN_VAL)), "--y-range", "1", "0")
    assert p.returncode == 2 and "lo < hi" in p.stderr
    p = wb(str(curve_path(QWEN_VAL)), "--until-fraction", "1.5")
    assert p.returncode == 2 and "(0, 1)" in p.stderr
