"""The notebooks run headless with papermill, under the project's `workbench` kernel (installed
into a temp prefix), against SQLite MLflow stores in temp folders."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import TINY_SESSION

papermill = pytest.importorskip("papermill")

from workbench.kernel import install  # noqa: E402
from workbench.runs.report import FIT_FILES  # noqa: E402
from workbench.tracking.mlflow_sink import MlflowSink  # noqa: E402
from workbench.tracking.store import create_run, ensure_experiment  # noqa: E402

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
TINY = TINY_SESSION


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    """The `workbench` kernel, installed where only this module's Jupyter looks."""
    prefix = tmp_path_factory.mktemp("kernel")
    install(prefix=str(prefix))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter") + os.pathsep + os.environ.get("JUPYTER_PATH", ""))
        yield "workbench"


def outputs(nb_path: Path) -> list[dict]:
    nb = json.loads(nb_path.read_text())
    return [o for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]


def text_of(outs: list[dict]) -> str:
    parts = []
    for o in outs:
        if o.get("output_type") == "stream":
            parts.append("".join(o["text"]))
        elif "data" in o:
            parts.append("".join(o["data"].get("text/plain", "")))
    return "\n".join(parts)


@pytest.mark.slow
def test_quickstart_runs_end_to_end_and_shows_the_fit(kernel, tmp_path, monkeypatch):
    from workbench.engine import cluster

    state = tmp_path / "ray-state"  # where the kernel's Session records the Ray cluster it starts
    monkeypatch.setenv("WORKBENCH_STATE_DIR", str(state))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out = tmp_path / "quickstart.out.ipynb"
    papermill.execute_notebook(
        str(NOTEBOOKS / "quickstart.ipynb"), str(out), kernel_name=kernel, cwd=str(tmp_path), progress_bar=False,
        parameters={"config": "configs/quickstart.yaml", "max_steps": 10, "overrides": {**TINY, "out_dir": str(tmp_path / "run")}, "tracking_uri": uri,
                    "experiment": "nbtest"},
    )
    outs = outputs(out)
    text = text_of(outs)
    # the fit printed by fit.summary(): a sigmoid, or (5 noisy points may not show a rise yet) a flat fit
    assert "sigmoid fit on 5 points" in text or "flat fit on 5 points: NO GAIN DETECTED" in text
    assert "A     =" in text and "C_mid =" in text and "forecast at" in text
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outs)  # the dashboard
    svgs = ["".join(o["data"]["image/svg+xml"]) for o in outs if "image/svg+xml" in o.get("data", {})]
    assert svgs and "mark-area" in svgs[-1] and "mark-symbol" in svgs[-1]  # session.chart(): band and points
    assert all((tmp_path / "run" / f).is_file() for f in FIT_FILES)  # the one layout of fit artifacts
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("nbtest").experiment_id])
    assert len(runs) == 1 and "fit/A" in runs[0].data.metrics and runs[0].info.status == "FINISHED"
    # a papermill execution is batch work: the kernel stopped the cluster it started when it exited
    addresses = (state / "started").read_text().split()
    assert len(addresses) == 1
    deadline = time.monotonic() + 60  # the stopper the exiting kernel spawned may still be at work
    while (cluster.cluster_pids(addresses[0]) or (state / "ray_address").exists()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not cluster.cluster_pids(addresses[0]), "Ray processes left behind by the papermill run"
    assert not (state / "ray_address").exists()


def log_curve(uri: str, experiment: str, name: str, A: float, C_mid: float, seed: int) -> str:
    rid = create_run(experiment, name, tracking_uri=uri)
    sink = MlflowSink(rid, uri)
    rng = np.random.default_rng(seed)
    for step in range(21):
        C = step * 0.3 * C_mid
        R = 0.1 + (A - 0.1) / (1 + (C_mid / C) ** 2.0) if C > 0 else 0.1
        sink.log_metrics({"val/pass_rate": float(R + rng.normal(0, 0.003)), "compute/device_hours": C}, step=step)
    sink.close("FINISHED")
    return rid


def test_compare_runs_fits_and_ranks_the_experiment(kernel, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ensure_experiment("cmp", uri)
    log_curve(uri, "cmp", "high", A=0.70, C_mid=1.0, seed=0)
    log_curve(uri, "cmp", "low", A=0.45, C_mid=1.0, seed=1)
    out = tmp_path / "compare.out.ipynb"
    papermill.execute_notebook(str(NOTEBOOKS / "compare_runs.ipynb"), str(out), kernel_name=kernel, cwd=str(tmp_path),
                               progress_bar=False, parameters={"experiment": "cmp", "tracking_uri": uri})
    outs = outputs(out)
    text = text_of(outs)
    assert "2 run(s) with val/pass_rate" in text
    assert "best: high" in text and "low" in text  # ranked on the asymptote A
    assert any("image/svg+xml" in o.get("data", {}) for o in outs)  # the overlay chart, rendered offline


def test_ablation_notebook_declares_what_the_sweeps_pass():
    from workbench.sweep import INJECTED, load_grid, notebook_parameters, validate_grid

    nb = NOTEBOOKS / "ablation.ipynb"
    declared = notebook_parameters(nb)
    assert set(INJECTED) <= set(declared)
    for grid in sorted((NOTEBOOKS.parent / "sweeps").glob("*.yaml")):
        validate_grid(load_grid(grid), declared, nb)  # raises on a parameter the notebook lacks


@pytest.mark.slow
@pytest.mark.long
def test_ablation_notebook_runs_as_a_sweep_point(kernel, tmp_path):
    from workbench.sweep import load_grid, run_sweep

    grid = tmp_path / "grid.yaml"
    grid.write_text(
        "name: nbsmoke\nbase: {max_steps: 6, overrides: " + json.dumps({**TINY, "out_dir": str(tmp_path / "point")}) + "}\n"
        "grid: {recipe: [scalerl]}\n"
    )
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    res = run_sweep(NOTEBOOKS / "ablation.ipynb", load_grid(grid), out=tmp_path / "sweep", kernel=kernel, tracking_uri=uri,
                    progress=False)
    assert not res.failed, res.points
    (point,) = res.points.values()
    from mlflow import MlflowClient

    run = MlflowClient(tracking_uri=uri).get_run(point["run_id"])
    assert run.data.params["recipe.name"] == "scalerl"  # the Session logged into the sweep's own run
    assert run.data.tags.get("mlflow.parentRunId") == res.parent_run_id
    assert "val/pass_rate" in run.data.metrics and run.info.status == "FINISHED"


def test_mathcode_notebook_fits_and_draws_each_domain(kernel, tmp_path):
    """notebooks/mathcode.ipynb on a finished task-mixture run folder (run_dir: no training here;
    the run itself is tests/engine/run/test_mixed_run.py): one fit and one panel per domain."""
    from tests.helpers.run_folder import write_run

    domains = {"math": {"A": 0.6, "B": 1.8, "C_mid": 0.01, "R0": 0.1}, "code": {"A": 0.4, "B": 1.5, "C_mid": 0.02, "R0": 0.15}}
    folder = write_run(tmp_path / "mathcode", 12, domains=domains)
    out = tmp_path / "mathcode.out.ipynb"
    papermill.execute_notebook(str(NOTEBOOKS / "mathcode.ipynb"), str(out), kernel_name=kernel, cwd=str(tmp_path),
                               progress_bar=False, parameters={"run_dir": str(folder)})
    outs = outputs(out)
    text = text_of(outs)
    assert "domains ['code', 'math']" in text and text.count("sigmoid fit on 11 points") == 2
    svgs = ["".join(o["data"]["image/svg+xml"]) for o in outs if "image/svg+xml" in o.get("data", {})]
    assert len(svgs) == 2 and "code: val/pass_rate/code" in svgs[0] and "math: val/pass_rate/math" in svgs[0]
