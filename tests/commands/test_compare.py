"""`workbench compare`: reads curves from a real SQLite MLflow store, fits, ranks, charts."""

from __future__ import annotations

import json

import numpy as np
import pytest

from workbench.cli import main
from workbench.tracking.mlflow_sink import MlflowSink
from workbench.tracking.store import create_run

TRUTH = {"strong": (0.65, 2.0, 2.0), "weak": (0.50, 1.6, 1.5)}  # A, B, C_mid in device-hours


def _curve_run(uri, experiment, name, A, B, C_mid, seed=0, status="FINISHED", points=25):
    rid = create_run(experiment, name, tracking_uri=uri)
    sink = MlflowSink(rid, uri)
    rng = np.random.default_rng(seed)
    for step, c in enumerate(np.linspace(0, 6 * C_mid, points)):
        r = 0.1 + (A - 0.1) / (1 + (C_mid / c) ** B) if c > 0 else 0.1
        sink.log_metrics({"val/pass_rate": r + rng.normal(0, 0.003), "compute/device_hours": c, "compute/flops": c * 1e15}, step=step)
    sink.close(status)
    return rid


@pytest.fixture(scope="module")
def populated(tracking_uri):
    exp = "compare-cli"
    ids = {name: _curve_run(tracking_uri, exp, name, *t) for name, t in TRUTH.items()}
    ids["crashed"] = _curve_run(tracking_uri, exp, "crashed", 0.9, 2.0, 1.0, status="FAILED")
    ids["sweep-parent"] = create_run(exp, "sweep:x", tracking_uri=tracking_uri)  # logs no curve
    ids["too-short"] = _curve_run(tracking_uri, exp, "too-short", 0.6, 2.0, 1.0, points=2)
    return exp, ids


def _json(capsys, argv):
    code = main(argv + ["--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_compare_experiment_ranks_by_fitted_asymptote(populated, tracking_uri, capsys):
    exp, ids = populated
    code, res = _json(capsys, ["compare", "--experiment", exp, "--tracking-uri", tracking_uri])
    assert code == 0
    rows = {r["name"]: r for r in res["runs"]}
    # the failed run and the run without the metric are left out; the short one is listed, unfitted
    assert set(rows) == {"strong", "weak", "too-short"}
    assert res["best"] == "strong"
    for name, (A, B, C_mid) in TRUTH.items():
        r = rows[name]
        assert abs(r["A"] - A) < 0.015 and r["A_lo"] <= r["A"] <= r["A_hi"]
        assert abs(r["B"] - B) < 0.3 and abs(r["C_mid"] - C_mid) / C_mid < 0.1
        assert r["run_id"] == ids[name]
    assert rows["strong"]["rank"] == 1 and rows["weak"]["rank"] == 2
    assert rows["too-short"]["A"] is None and rows["too-short"]["error"]


def test_compare_text_table_and_failed_runs_on_request(populated, tracking_uri, capsys):
    exp, _ = populated
    assert main(["compare", "--experiment", exp, "--tracking-uri", tracking_uri, "--include-failed"]) == 0
    out = capsys.readouterr().out
    assert "crashed" in out and "strong" in out and "C_mid" in out
    assert "not fitted: too-short" in out
    assert out.index(" crashed ") < out.index(" strong ")  # A = 0.9 ranks first


def test_compare_run_ids_against_flops(populated, tracking_uri, capsys):
    _, ids = populated
    code, res = _json(capsys, ["compare", ids["strong"], ids["weak"], "--x", "compute/flops", "--tracking-uri", tracking_uri])
    assert code == 0
    c_mid = {r["name"]: r["C_mid"] for r in res["runs"]}
    assert abs(c_mid["strong"] / 2e15 - 1) < 0.1  # same curve, compute in FLOPs


def test_compare_writes_overlay_chart(populated, tracking_uri, tmp_path, capsys):
    _, ids = populated
    out = tmp_path / "overlay.html"
    assert main(["compare", ids["strong"], ids["weak"], "--plot", str(out), "--tracking-uri", tracking_uri]) == 0
    html = out.read_text()
    assert "vega" in html.lower() and "strong" in html and "weak" in html


@pytest.mark.parametrize(
    "argv, message",
    [
        (["compare"], "either --experiment NAME or one or more RUN_IDs"),
        (["compare", "--experiment", "no-such-exp"], "no MLflow experiment named 'no-such-exp'"),
        (["compare", "f" * 32], "no MLflow run"),
        (["compare", "--experiment", "compare-cli", "--metric", "val/other"], "no run of experiment"),
        (["compare", "--experiment", "compare-cli", "--plot", "x.pdf"], "--plot"),
    ],
)
def test_compare_user_errors_exit_2(populated, tracking_uri, capsys, argv, message):
    assert main(argv + ["--tracking-uri", tracking_uri]) == 2
    assert message in capsys.readouterr().err


def test_compare_nothing_fittable_is_a_user_error(populated, tracking_uri, capsys):
    _, ids = populated
    assert main(["compare", ids["too-short"], "--tracking-uri", tracking_uri]) == 2
    assert "no run could be fitted" in capsys.readouterr().err


def test_compare_marks_a_run_whose_driver_died_as_failed(tracking_uri, tmp_path, capsys):
    """A run left RUNNING by a dead driver (its folder's heartbeat is stale) is ended FAILED when
    `workbench compare` looks at the store, and is then compared like any failed run (left out)."""
    import os
    import time

    from mlflow import MlflowClient

    from workbench.runs.liveness import STALE_S

    exp = "compare-dead"
    _curve_run(tracking_uri, exp, "alive", 0.6, 2.0, 1.0)
    folder = tmp_path / "dead-run"
    folder.mkdir()
    (folder / "heartbeat").write_text("x")
    old = time.time() - STALE_S - 60
    os.utime(folder / "heartbeat", (old, old))
    rid = create_run(exp, "dead", {"workbench.out_dir": str(folder)}, tracking_uri=tracking_uri)
    MlflowSink(rid, tracking_uri).log_metrics({"val/pass_rate": 0.3, "compute/device_hours": 0.1}, step=1)
    code = main(["compare", "--experiment", exp, "--tracking-uri", tracking_uri, "--json"])
    captured = capsys.readouterr()
    assert code == 0 and {r["name"] for r in json.loads(captured.out)["runs"]} == {"alive"}
    run = MlflowClient(tracking_uri).get_run(rid)
    assert run.info.status == "FAILED" and "driver or coordinator died" in run.data.tags["workbench.died"]
    assert "dead" in captured.err and "marked FAILED" in captured.err


def test_compare_against_a_server_that_does_not_answer_is_one_line(capsys, free_port):
    # before the fix MLflow retried the dead server for minutes and then printed a traceback
    uri = f"http://127.0.0.1:{free_port}/"
    assert main(["compare", "--experiment", "e", "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err
    assert f"MLflow tracking server {uri} is not reachable" in err and err.count("\n") == 1


def test_compare_never_creates_a_store(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # a folder with no store (and no project above it that has one)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "pyproject.toml").write_text("[project]\nname='p'\n")
    assert main(["compare", "--experiment", "e"]) == 2
    assert f"no MLflow store at {tmp_path.resolve() / 'mlflow.db'}" in capsys.readouterr().err
    missing = tmp_path / "nonexist" / "dir" / "m.db"
    assert main(["compare", "--experiment", "e", "--tracking-uri", f"sqlite:///{missing}"]) == 2
    assert "`workbench run` (tracking.mlflow=true, the default), a Session and `workbench sweep` create it" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pyproject.toml"]


@pytest.mark.parametrize("command", [["compare", "--experiment", "e"], ["ui", "--port", "1"]])
def test_a_file_that_is_not_a_database_is_named_in_one_line(tmp_path, capsys, command):
    junk = tmp_path / "junk.db"
    junk.write_text("not a database")
    assert main(command + ["--tracking-uri", f"sqlite:///{junk}"]) == 2
    err = capsys.readouterr().err
    assert f"{junk} is not an SQLite database (file is not a database)" in err and err.count("\n") == 1


def test_compare_takes_a_plain_path_to_the_sqlite_file(populated, tracking_uri, capsys):
    from workbench.tracking.store import sqlite_path

    exp, _ = populated
    code, res = _json(capsys, ["compare", "--experiment", exp, "--tracking-uri", str(sqlite_path(tracking_uri))])
    assert code == 0 and res["best"] == "strong"


def test_compare_names_runs_by_recipe_and_keeps_run_names_apart(tracking_uri, capsys):
    exp = "compare-recipes"
    for name, recipe, A in (("quickstart-1", "scalerl", 0.65), ("quickstart-2", "scalerl", 0.64), ("dapo-run", "dapo", 0.5)):
        rid = _curve_run(tracking_uri, exp, name, A, 2.0, 2.0)
        MlflowSink(rid, tracking_uri).log_config({"recipe": {"name": recipe}})
    _curve_run(tracking_uri, exp, "no-recipe", 0.4, 2.0, 2.0)  # logged no recipe: its run name
    code, res = _json(capsys, ["compare", "--experiment", exp, "--tracking-uri", tracking_uri])
    assert code == 0
    assert {r["name"] for r in res["runs"]} == {"scalerl (quickstart-1)", "scalerl (quickstart-2)", "dapo (dapo-run)", "no-recipe"}
    assert main(["compare", "--experiment", exp, "--tracking-uri", tracking_uri]) == 0
    table = capsys.readouterr().out
    assert "recipe" in table and "scalerl (quickstart-1)" in table and "dapo (dapo-run)" in table


@pytest.mark.parametrize("flag, value, close", [("--x", "compute/flop", "compute/flops"), ("--x", "nosuch", "none of its"),
                                                ("--metric", "val/pass-rate", "val/pass_rate")])
def test_a_metric_no_run_logged_is_one_line_with_close_names(populated, tracking_uri, capsys, flag, value, close):
    _, ids = populated
    for selection in (["--experiment", "compare-cli"], [ids["strong"], ids["weak"]]):
        assert main(["compare", *selection, flag, value, "--tracking-uri", tracking_uri]) == 2
        captured = capsys.readouterr()
        assert repr(value) in captured.err and close in captured.err
        assert captured.err.count("\n") == 1 and captured.out == ""  # not the metric list once per run


def test_compare_ranks_one_domain_of_mixed_runs(tracking_uri, experiment, capsys):
    """Runs on a math+code mixture log val/pass_rate/<domain>: `--metric val/pass_rate/code` ranks
    the recipes on the code curve alone, which can differ from the math ranking."""
    truth = {"a": {"math": (0.70, 2.0, 2.0), "code": (0.30, 1.6, 1.5)}, "b": {"math": (0.55, 2.0, 2.0), "code": (0.45, 1.6, 1.5)}}
    rng = np.random.default_rng(3)
    for name, domains in truth.items():
        sink = MlflowSink(create_run(experiment, name, tracking_uri=tracking_uri), tracking_uri)
        for step, c in enumerate(np.linspace(0, 12.0, 25)):
            row = {"compute/device_hours": c}
            for d, (A, B, C_mid) in domains.items():
                row[f"val/pass_rate/{d}"] = (0.1 + (A - 0.1) / (1 + (C_mid / c) ** B) if c > 0 else 0.1) + rng.normal(0, 0.003)
            row["val/pass_rate"] = float(np.mean([row[f"val/pass_rate/{d}"] for d in domains]))
            sink.log_metrics(row, step=step)
        sink.close("FINISHED")
    base = ["compare", "--experiment", experiment, "--tracking-uri", tracking_uri]
    for domain, best in (("code", "b"), ("math", "a")):
        code, res = _json(capsys, base + ["--metric", f"val/pass_rate/{domain}"])
        rows = {r["name"]: r for r in res["runs"]}
        assert code == 0 and res["best"] == best, domain
        assert abs(rows["a"]["A"] - truth["a"][domain][0]) < 0.02
