"""workbench sweep: grid files, validation against the notebook, and real papermill sweeps
(the project's kernel, a real SQLite MLflow store read back with mlflow.search_runs)."""

from __future__ import annotations

import json
import sqlite3
import zlib
from pathlib import Path

import mlflow
import pytest
import yaml
from mlflow import MlflowClient

from workbench.cli import main
from workbench.configtools import ConfigError
from workbench.errors import UserError
from workbench.sweep import load_grid, notebook_parameters, point_key, run_sweep, validate_grid

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
CURVE_NB = DATA / "curve_notebook.ipynb"
LOO = [
    "scalerl", "scalerl-loo-loss-dapo", "scalerl-loo-loss-gspo", "scalerl-loo-agg-sample", "scalerl-loo-agg-token",
    "scalerl-loo-norm-prompt", "scalerl-loo-norm-none", "scalerl-loo-no-zvf", "scalerl-loo-no-npr",
    "scalerl-loo-no-fp32", "scalerl-loo-ppo-off-policy", "scalerl-loo-length-penalty",
]


def _write(tmp_path, text: str, name="grid.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_grid_product_base_and_points(tmp_path):
    g = load_grid(_write(tmp_path, """
name: t
base: {max_steps: 5, overrides: {train.lr: 1.0e-6}}
grid: {recipe: [a, b], seed: [0, 1]}
points:
  - {recipe: c, overrides: {eval.every_steps: 2}}
"""))
    assert g.name == "t" and len(g.points) == 5
    assert g.points[0] == {"max_steps": 5, "overrides": {"train.lr": 1e-6}, "recipe": "a", "seed": 0}
    assert g.points[3]["recipe"] == "b" and g.points[3]["seed"] == 1
    # mappings are merged key by key, not replaced
    assert g.points[4]["overrides"] == {"train.lr": 1e-6, "eval.every_steps": 2}
    # labelled by what differs between points: the shared base override is left out
    assert g.labels == ["recipe=a,seed=0", "recipe=a,seed=1", "recipe=b,seed=0", "recipe=b,seed=1", "eval.every_steps=2,recipe=c"]


def test_point_key_is_stable_and_order_free():
    assert point_key({"a": 1, "b": {"x": 2, "y": 3}}) == point_key({"b": {"y": 3, "x": 2}, "a": 1})
    assert point_key({"a": 1}) != point_key({"a": 2})
    assert len(point_key({"a": 1})) == 12


def test_single_varying_key_labels_by_value(tmp_path):
    g = load_grid(_write(tmp_path, "base: {seed: 0}\ngrid: {recipe: [scalerl, scalerl-loo-no-fp32]}\n", "my_sweep.yaml"))
    assert g.name == "my_sweep"  # default name: the file name
    assert g.labels == ["scalerl", "scalerl-loo-no-fp32"]


def test_override_points_are_labelled_by_the_override_that_differs(tmp_path):
    """A results table of override points has one short name per point (not the JSON of the whole
    merged overrides), the same every time the grid is read (a resumed sweep names its points alike)."""
    text = """
name: lr
base: {recipe: scalerl, max_steps: 50, overrides: {eval.every_steps: 5, eval.num_prompts: 64, out_dir: runs/x}}
points:
  - {}
  - {overrides: {train.lr: 1.0e-6}}
  - {overrides: {train.lr: 3.0e-6}}
  - {overrides: {train.lr: 3.0e-6, eval.num_prompts: 32}}
  - {seed: 1, overrides: {seed: 2}}
"""
    g = load_grid(_write(tmp_path, text))
    n = "eval.num_prompts=64"  # differs in one point: named wherever it is set
    assert g.labels == [n, f"{n},train.lr=1e-06", f"{n},train.lr=3e-06", "eval.num_prompts=32,train.lr=3e-06",
                        f"{n},overrides.seed=2,seed=1"]  # 'seed' is both a parameter and an override: spelt out
    lr = load_grid(_write(tmp_path, "base: {overrides: {eval.every_steps: 5, eval.num_prompts: 64}}\n"
                          "points: [{}, {overrides: {train.lr: 1.0e-6}}]\n", "lr.yaml"))
    assert lr.labels == ["default", "train.lr=1e-06"]  # a point setting nothing that varies runs the defaults
    again = load_grid(_write(tmp_path, text, "copy.yaml"))
    assert again.labels == g.labels and again.keys() == g.keys()
    one = load_grid(_write(tmp_path, "base: {overrides: {eval.every_steps: 5}}\npoints: [{overrides: {train.lr: 1.0e-6}}]\n", "one.yaml"))
    assert one.labels == ["train.lr=1e-06"]  # a single point: named by what its own entry sets
    nums = load_grid(_write(tmp_path, "grid: {seed: [0, 1]}\n", "nums.yaml"))
    assert nums.labels == ["seed=0", "seed=1"]  # a bare number would not say what it is


@pytest.mark.parametrize(
    "text, message",
    [
        ("name: x\ngird: {a: [1]}\n", "unknown key 'gird'"),
        ("grid: {seed: 3}\n", "grid.seed must be a non-empty list"),
        ("base: {a: 1}\n", "give 'grid'"),
        ("points: [{a: 1}, {a: 1}]\n", "points 1 and 2 have the same parameters"),
        ("points: [a, b]\n", "list of mappings"),
        ("- 1\n- 2\n", "mapping at the top level"),
    ],
)
def test_bad_grid_files_name_the_problem(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_grid(_write(tmp_path, text))


def test_unknown_parameter_is_named_with_the_valid_ones(tmp_path):
    g = load_grid(_write(tmp_path, "grid: {recipe: [a], lr: [0.1]}\n"))
    with pytest.raises(UserError, match=r"unknown parameter 'lr'.*'fail', 'max_steps', 'overrides', 'recipe', 'seed'"):
        validate_grid(g, notebook_parameters(CURVE_NB), CURVE_NB)


def test_injected_names_cannot_be_set_by_the_grid(tmp_path):
    g = load_grid(_write(tmp_path, "points: [{run_id: abc}]\n"))
    with pytest.raises(UserError, match="'run_id' is set by the sweep"):
        validate_grid(g, notebook_parameters(CURVE_NB), CURVE_NB)


def test_notebook_without_parameters_cell_is_refused(tmp_path):
    grid = _write(tmp_path, "grid: {recipe: [a]}\n")
    with pytest.raises(UserError, match="no cell tagged 'parameters'"):
        run_sweep(DATA / "no_params_notebook.ipynb", grid, out=tmp_path / "out", kernel="python3")
    with pytest.raises(UserError, match="notebook not found"):
        run_sweep(tmp_path / "missing.ipynb", grid, out=tmp_path / "out", kernel="python3")


def test_notebook_must_declare_run_id_and_tracking_uri(tmp_path):
    g = load_grid(_write(tmp_path, "grid: {marker: [a]}\n"))
    with pytest.raises(UserError, match=r"must declare \['run_id', 'tracking_uri'\]"):
        validate_grid(g, notebook_parameters(DATA / "kernel_check.ipynb"), "kernel_check.ipynb")


def test_missing_kernel_is_a_user_error(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    grid = _write(tmp_path, "grid: {recipe: [a]}\n")
    with pytest.raises(UserError, match="kernel 'no-such-kernel' is not installed"):
        run_sweep(CURVE_NB, grid, out=tmp_path / "out", kernel="no-such-kernel")


def test_shipped_grids_fit_the_sweep_notebooks_and_recipes():
    smoke = load_grid(ROOT / "sweeps" / "smoke.yaml")
    loo = load_grid(ROOT / "sweeps" / "scalerl_loo.yaml")
    loo_smoke = load_grid(ROOT / "sweeps" / "scalerl_loo_smoke.yaml")
    for nb in (ROOT / "notebooks" / "ablation.ipynb", CURVE_NB):  # the real one and the test stand-in
        declared = notebook_parameters(nb)
        for g in (smoke, loo_smoke):
            validate_grid(g, declared, nb)
    validate_grid(loo, notebook_parameters(ROOT / "notebooks" / "ablation.ipynb"), ROOT / "notebooks" / "ablation.ipynb")
    assert len(smoke.points) == 2
    # the study leaves the length-control row out (configs/loo.yaml: no thinking phase to act on)
    study = LOO[:-1] + ["scalerl-sync"]  # and the price of asynchrony beside it
    assert [p["recipe"] for p in loo.points] == study and LOO[-1] == "scalerl-loo-length-penalty"
    assert loo.labels == study and loo.experiment == "scalerl-loo"
    assert [p["recipe"] for p in loo_smoke.points] == LOO and loo_smoke.experiment == "scalerl-loo-smoke"
    assert {(ROOT / "notebooks" / p["config"]).resolve() for p in loo.points} == {ROOT / "configs" / "loo.yaml"}
    presets = {p.stem for p in (ROOT / "workbench" / "rl" / "recipes").glob("*.yaml")}
    assert {p["recipe"] for p in smoke.points + loo.points + loo_smoke.points} <= presets


def _truth(recipe: str) -> tuple[float, float]:
    """The A and B that tests/data/curve_notebook.ipynb draws its curve from."""
    h = zlib.crc32(recipe.encode())
    return 0.55 + 0.10 * ((h % 1000) / 1000), 1.5 + 0.8 * (((h // 1000) % 1000) / 1000)


@pytest.fixture(scope="module")
def workbench_kernel(tmp_path_factory):
    """The project's kernel, installed into a temporary Jupyter path for this module."""
    from workbench.kernel import install

    prefix = tmp_path_factory.mktemp("jupyter")
    with pytest.MonkeyPatch.context() as mp:
        install("workbench", prefix=str(prefix))
        mp.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
        yield "workbench"


@pytest.fixture(scope="module")
def sweep_run(tmp_path_factory, workbench_kernel):
    """One real sweep: sweeps/smoke.yaml plus a failing point, two points at once."""
    tmp = tmp_path_factory.mktemp("sweep")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    grid = yaml.safe_load((ROOT / "sweeps" / "smoke.yaml").read_text())
    grid["points"] = [{"recipe": "scalerl-loo-no-npr", "fail": True}]
    path = tmp / "grid.yaml"
    path.write_text(yaml.safe_dump(grid))
    out = tmp / "out"
    res = run_sweep(CURVE_NB, path, out=out, parallel=2, kernel=workbench_kernel, tracking_uri=uri, progress=False)
    return res, uri, path, out


@pytest.mark.slow
def test_sweep_records_every_point_in_mlflow(sweep_run):
    res, uri, _, out = sweep_run
    mlflow.set_tracking_uri(uri)
    try:
        runs = mlflow.search_runs(experiment_names=["smoke"])
    finally:
        mlflow.set_tracking_uri(None)
    assert len(runs) == 4  # the parent and three points
    parent = runs[runs["run_id"] == res.parent_run_id].iloc[0]
    assert parent["status"] == "FAILED"  # one point failed
    children = runs[runs["tags.mlflow.parentRunId"] == res.parent_run_id]
    by_name = {r["tags.mlflow.runName"]: r for _, r in children.iterrows()}
    assert set(by_name) == {"recipe=scalerl", "recipe=scalerl-loo-no-fp32", "fail=True,recipe=scalerl-loo-no-npr"}
    assert by_name["recipe=scalerl"]["status"] == "FINISHED"
    assert by_name["recipe=scalerl"]["params.recipe.name"] == "scalerl"
    bad = by_name["fail=True,recipe=scalerl-loo-no-npr"]
    assert bad["status"] == "FAILED"
    assert "RuntimeError: synthetic failure" in bad["tags.workbench.error"]
    c = MlflowClient(uri)
    for _, r in children.iterrows():  # each executed notebook is an artifact of its run
        assert any(a.path.endswith(".ipynb") for a in c.list_artifacts(r["run_id"]))
    parent_files = {a.path for a in c.list_artifacts(res.parent_run_id)}
    assert {"comparison.md", "comparison.csv", "comparison.html", "manifest.json", "grid.yaml"} <= parent_files
    # two points wrote to the SQLite store at once: it must still be sound
    db = Path(uri[len("sqlite:///"):])
    assert sqlite3.connect(db).execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@pytest.mark.slow
def test_failed_point_keeps_its_notebook_and_error(sweep_run):
    res, _, _, out = sweep_run
    assert len(res.failed) == 1
    entry = res.points[res.failed[0]]
    assert entry["status"] == "FAILED" and "synthetic failure" in entry["error"]
    executed = Path(entry["notebook"])
    assert executed.is_file() and executed.parent == out / "points"
    assert "synthetic failure" in executed.read_text()


@pytest.mark.slow
def test_sweep_fits_and_compares_the_curves(sweep_run):
    res, _, _, out = sweep_run
    fits = res.comparison
    assert set(fits.fits) == {"recipe=scalerl", "recipe=scalerl-loo-no-fp32"}
    for label, fit in fits.fits.items():
        a_true, b_true = _truth(label.split("=", 1)[1])
        assert abs(fit.A - a_true) < 0.02, (label, fit.A, a_true)
        assert fit.A_ci[0] <= fit.A <= fit.A_ci[1]
        assert abs(fit.B - b_true) < 0.4, (label, fit.B, b_true)
    table = (out / "comparison.md").read_text()
    assert "recipe=scalerl-loo-no-fp32" in table and "C_mid" in table
    csv = (out / "comparison.csv").read_text().splitlines()
    assert csv[0].startswith("name,run_id,A,A_lo,A_hi,B,B_lo,B_hi,C_mid")
    assert len(csv) == 3


@pytest.mark.slow
def test_rerun_skips_finished_points(sweep_run, capsys):
    res, uri, grid, out = sweep_run
    before = {k: p["run_id"] for k, p in res.points.items()}
    code = main(["sweep", str(CURVE_NB), "--grid", str(grid), "--out", str(out), "--kernel", "workbench",
                 "--tracking-uri", uri, "--no-progress", "--no-chart"])
    printed = capsys.readouterr().out
    assert code == 1  # the failing point failed again
    assert "1 run, 2 already done" in printed
    assert "synthetic failure" in printed and "sigmoid fits of 2 run(s)" in printed
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["parent_run_id"] == res.parent_run_id  # the same parent sweep run
    after = manifest["points"]
    failed_key = res.failed[0]
    for k, rid in before.items():
        if k == failed_key:
            assert after[k]["run_id"] != rid  # retried as a new child run
        else:
            assert after[k]["run_id"] == rid  # not run again
    assert after[failed_key]["status"] == "FAILED"


def test_cli_reports_user_errors_in_one_line(tmp_path, capsys):
    grid = _write(tmp_path, "grid: {learning_rate: [1]}\n")
    code = main(["sweep", str(CURVE_NB), "--grid", str(grid), "--kernel", "python3", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2
    assert "unknown parameter 'learning_rate'" in err and "Traceback" not in err


# ---------------------------------------------------------------- bad input: one clear line, nothing lost
def _nothing_written(tmp_path) -> None:
    assert not (tmp_path / "out").exists() and not (tmp_path / "mlflow.db").exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--stop-early", "--rung-evals", "3"], "--rung-evals must be at least 4"),
        (["--seeds", "0"], "--seeds must be a whole number >= 1"),
        (["--rung-evals", "6"], "only apply with --stop-early"),
        (["--cell-timeout", "-5"], "--cell-timeout must be a number of seconds > 0, got -5"),
        (["--cell-timeout", "0"], "--cell-timeout must be a number of seconds > 0, got 0"),
        (["--parallel", "0"], "--parallel must be >= 1, got 0"),
    ],
)
def test_bad_sweep_options_are_one_line_and_write_nothing(tmp_path, capsys, flags, message):
    grid = _write(tmp_path, "grid: {recipe: [a, b]}\n")
    code = main(["sweep", str(CURVE_NB), "--grid", str(grid), "--kernel", "python3", "--out", str(tmp_path / "out"),
                 "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", *flags])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    _nothing_written(tmp_path)


def test_missing_grid_file_is_named_as_a_grid_file(tmp_path, capsys):
    missing = tmp_path / "nosuch.yaml"
    code = main(["sweep", str(CURVE_NB), "--grid", str(missing), "--kernel", "python3", "--out", str(tmp_path / "out"),
                 "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"])
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == f"workbench sweep: error: grid file not found: {missing}"
    _nothing_written(tmp_path)


def test_points_must_share_the_x_axis_unit(tmp_path, capsys):
    from workbench.sweep import check_x_unit

    text = "points:\n  - {recipe: a}\n  - {recipe: b, overrides: {resources.trainer_gpus: 1}}\n"
    grid = _write(tmp_path, text)
    code = main(["sweep", str(CURVE_NB), "--grid", str(grid), "--kernel", "python3", "--out", str(tmp_path / "out"),
                 "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"])
    err = capsys.readouterr().err
    assert code == 2 and "do not share the x-axis unit" in err and "GPU-hours" in err and "CPU device-hours" in err
    assert len(err.strip().splitlines()) == 1
    _nothing_written(tmp_path)
    g = load_grid(grid)
    check_x_unit(g, "compute/flops")  # FLOPs are one unit on any device
    with pytest.raises(UserError, match="set x to"):  # a notebook whose `x` parameter differs between points
        check_x_unit(load_grid(_write(tmp_path, "points: [{x: step}, {x: compute/flops}]\n", "g2.yaml")), "step",
                     {"x": {"default": "'step'"}})


def test_seeds_expand_each_point_and_keep_its_group(tmp_path):
    from workbench.sweep import with_seeds

    g = load_grid(_write(tmp_path, "base: {seed: 5}\ngrid: {recipe: [a, b]}\n"))
    s = with_seeds(g, 2, notebook_parameters(CURVE_NB))
    assert [p["seed"] for p in s.points] == [5, 6, 5, 6]
    assert s.groups == ["a", "a", "b", "b"] and s.labels == ["a/seed=5", "a/seed=6", "b/seed=5", "b/seed=6"]
    assert len(set(s.keys())) == 4
    assert with_seeds(g, 1, {}) is g
    with pytest.raises(UserError, match="declares no 'seed'"):
        with_seeds(g, 2, {"recipe": {}})


def _close_pair() -> tuple[str, str, str]:
    """Two recipe names whose synthetic A (see _truth) differ by < 0.01, and one 0.05+ below them."""
    names = [f"r{i}" for i in range(400)]
    by_a = sorted(names, key=lambda n: _truth(n)[0])
    for a, b in zip(by_a, by_a[1:]):
        if abs(_truth(a)[0] - _truth(b)[0]) < 0.004 and _truth(a)[0] > 0.62:
            low = next(n for n in by_a if _truth(n)[0] < _truth(a)[0] - 0.05)
            return a, b, low
    raise AssertionError("no close pair")


@pytest.mark.slow
def test_seeds_are_fitted_jointly_and_compared_with_the_tie_rule(tmp_path, workbench_kernel):
    a, b, low = _close_pair()
    grid = _write(tmp_path, f"name: seeds\nbase: {{max_steps: 12}}\ngrid: {{recipe: [{a}, {b}, {low}]}}\n")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    res = run_sweep(CURVE_NB, grid, out=tmp_path / "out", parallel=2, kernel=workbench_kernel, tracking_uri=uri,
                    progress=False, chart=False, seeds=2)
    assert not res.failed and len(res.points) == 6
    fits = res.comparison
    assert set(fits.fits) == {a, b, low}  # one joint fit per point, not one per run
    for name, fit in fits.fits.items():
        assert len(fit.run_names) == 2 and fit.n == 2 * 12  # both seeds' evaluations at compute > 0
        assert len(fits.run_ids[name]) == 2
    rows = {r.name: r for r in fits.comparison.rows}
    assert rows[a].group == rows[b].group != rows[low].group  # |dA| <= 0.02: a tie on A, then B decides
    assert "ties" in (rows[a].verdict if rows[a].rank < rows[b].rank else rows[b].verdict)
    assert rows[low].rank == 3
    csv = (tmp_path / "out" / "comparison.csv").read_text()
    assert ";" in csv.splitlines()[1].split(",")[1]  # both seeds' run ids on the point's row


# ---------------------------------------------------------------- stop losers by forecast (the real engine)
def _cluster_addresses(state_dirs) -> list[str]:
    return [a for d in state_dirs if (Path(d) / "started").is_file() for a in (Path(d) / "started").read_text().split()]


@pytest.mark.slow
@pytest.mark.long
def test_stop_early_stops_the_crippled_point_and_leaves_no_ray(tmp_path, workbench_kernel, capsys):
    """The quickstart (its own recipe, lr and batch; 200 steps, an evaluation every 10) against a
    crippled copy (train.lr 1e-6). The crippled point is stopped after its first rung; the healthy
    one still ranks first; >= 30% of the compute is saved; and no process of the Ray clusters the
    sweep's points started is left."""
    from workbench.engine import cluster
    from workbench.runs.fits import STOPPED_REASON_TAG, STOPPED_TAG

    small = {"eval.every_steps": 10, "eval.num_prompts": 100, "eval.samples_per_prompt": 4, "checkpoint.every_steps": 1000,
             "resources.generator_cpus": 0.5, "resources.trainer_cpus": 0.5, "resources.evaluator_cpus": 0.5}
    points = [{"overrides": {**small, "out_dir": str(tmp_path / "healthy")}},
              {"overrides": {**small, "train.lr": 1e-6, "out_dir": str(tmp_path / "crippled")}}]
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"name": "early", "base": {"max_steps": 200, "recipe": "scalerl"}, "points": points}))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # parallel 1: the healthy point runs first, so the crippled one is judged against a whole curve.
    # Compute in FLOPs: device-hours count wall time, which the other jobs on this machine distort
    # (the two points' device-hours per step differed 2x in one run here); FLOPs per step do not.
    res = run_sweep(ROOT / "notebooks" / "ablation.ipynb", grid, out=tmp_path / "out", kernel=workbench_kernel,
                    tracking_uri=uri, progress=False, chart=False, stop_early=True, rung_evals=4, poll=1.0,
                    x="compute/flops")
    by_lr = {p["params"]["overrides"].get("train.lr"): p for p in res.points.values()}
    healthy, crippled = by_lr[None], by_lr[1e-6]
    assert not res.failed, res.points
    assert healthy["status"] == "FINISHED" and crippled["status"] == "STOPPED", res.points
    assert res.compute_saved_frac >= 0.30, (res.compute_saved_frac, res.points)

    c = MlflowClient(uri)
    run = c.get_run(crippled["run_id"])
    assert run.data.tags[STOPPED_TAG] == "true" and "stopped by forecast" in run.data.tags[STOPPED_REASON_TAG]
    from workbench.tracking.queries import run_curve

    curve = run_curve(crippled["run_id"], metric="val/pass_rate", x="compute/flops", tracking_uri=uri)
    assert f"after {len(curve)} evaluations," in run.data.tags[STOPPED_REASON_TAG]  # the count its curve shows
    assert crippled["stopped_reason"] == run.data.tags[STOPPED_REASON_TAG]
    assert "fit/A" in run.data.metrics  # a stopped point keeps its curve and its fit
    assert c.get_run(res.parent_run_id).data.metrics["sweep/compute_saved_frac"] == pytest.approx(res.compute_saved_frac)
    assert res.comparison.comparison.rows[0].name == healthy["label"]  # the winner a full sweep picks
    assert res.comparison.frame.set_index("name").loc[crippled["label"], "stopped"]

    capsys.readouterr()
    assert main(["compare", "--experiment", "early", "--tracking-uri", uri, "--x", "compute/flops"]) == 0  # KILLED, but stopped by forecast: kept
    printed = capsys.readouterr().out
    assert "sigmoid fits of 2 run(s)" in printed and "stopped early" in printed

    addresses = _cluster_addresses(res.ray_state_dirs)
    assert len(addresses) == 2  # each point's Session started a cluster of its own...
    for a in addresses:  # ...and none of their processes is left
        assert not cluster.cluster_pids(a), f"Ray processes of {a} left behind"


# ---------------------------------------------------------------- interrupted: SIGTERM takes Ctrl-C's clean path
def test_sigterm_is_an_interrupt_only_while_the_sweep_runs():
    import os
    import signal
    import time

    from workbench.sweep.interrupts import sigterm_as_interrupt

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        with sigterm_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(10)  # the handler interrupts this
    assert signal.getsignal(signal.SIGTERM) is before  # the caller's handler is back


@pytest.mark.slow
@pytest.mark.long  # test_sigterm_is_an_interrupt_only_while_the_sweep_runs is CI's check of the signal path
def test_sigterm_mid_point_stops_its_processes_and_cluster_and_records_it_killed(tmp_path, workbench_kernel):
    """`timeout N workbench sweep ...` sends SIGTERM to the sweep's process group (papermill
    included) while a point trains on its own Ray cluster. The sweep must end as Ctrl-C ends it:
    "interrupted", status 130, no process of the point (papermill, kernel, Ray cluster, engine
    actors) left, the point's run KILLED as interrupted by the user, the next point not started."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from workbench.engine import cluster
    from workbench.sweep.runner import INTERRUPTED

    small = {"eval.every_steps": 5, "eval.num_prompts": 50, "eval.samples_per_prompt": 2, "checkpoint.every_steps": 1000,
             "resources.generator_cpus": 0.5, "resources.trainer_cpus": 0.5, "resources.evaluator_cpus": 0.5}
    runs = tmp_path / "runs"
    points = [{"overrides": {**small, "out_dir": str(runs / "first")}},
              {"overrides": {**small, "train.lr": 1e-6, "out_dir": str(runs / "second")}}]
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"name": "interrupted", "base": {"max_steps": 400, "recipe": "scalerl"}, "points": points}))
    uri, out = f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "out"
    cmd = [sys.executable, "-m", "workbench.cli", "sweep", str(ROOT / "notebooks" / "ablation.ipynb"), "--grid", str(grid),
           "--out", str(out), "--kernel", workbench_kernel, "--tracking-uri", uri, "--no-progress", "--no-chart"]
    with open(tmp_path / "stderr", "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    try:
        deadline = time.time() + 480
        while not any(p.stat().st_size for p in runs.rglob("metrics.jsonl")):  # the first point is training
            assert proc.poll() is None and time.time() < deadline, (tmp_path / "stderr").read_text()
            time.sleep(2)
        os.killpg(proc.pid, signal.SIGTERM)  # what `timeout` does
        rc = proc.wait(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    stderr = (tmp_path / "stderr").read_text()
    assert rc == 130 and stderr.strip().splitlines()[-1] == "workbench sweep: interrupted", stderr
    assert "Traceback" not in stderr

    manifest = json.loads((out / "manifest.json").read_text())
    first, second = (next(p for p in manifest["points"].values() if p["params"]["overrides"]["out_dir"] == str(runs / n))
                     for n in ("first", "second"))
    assert first["status"] == "KILLED" and first["error"] == INTERRUPTED
    assert second["status"] == "PENDING" and not second.get("run_id")  # never started: a re-run runs it
    state = Path(first["ray_state"])
    addresses = (state / "started").read_text().split()
    assert addresses  # the point's Session started a cluster of its own...
    for a in addresses:  # ...of which no process (GCS, raylet, Coordinator/Generator/Trainer workers) is left
        assert not cluster.cluster_pids(a), f"Ray processes of {a} left behind"
    assert not cluster.pids_with_env(cluster.STATE_DIR_ENV, str(state))  # nor papermill, nor the kernel
    assert not (state / "ray_address").exists()

    c = MlflowClient(uri)
    run = c.get_run(first["run_id"])
    assert run.info.status == "KILLED" and run.data.tags["workbench.error"] == INTERRUPTED
    assert c.get_run(manifest["parent_run_id"]).info.status == "KILLED"
