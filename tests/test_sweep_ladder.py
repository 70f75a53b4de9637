"""`workbench sweep --ladder KEY` (workbench.sweep.ladder): the stop rule with a stubbed rung
runner (each "run" is a synthetic curve of a known law, fitted like a real rung), and the grid checks."""

from __future__ import annotations

import json

import pytest

from tests.scaling.test_config_curve import WIDTHS, curve
from workbench.errors import UserError
from workbench.scaling import fit_sigmoid
from workbench.sweep.grid import Grid
from workbench.sweep.ladder import LadderGate, check_ladder, run_ladder
from tests.test_sweep import workbench_kernel  # noqa: F401  (the fixture: the project kernel in a temporary Jupyter path)


def climb(flat: bool, tmp_path, min_gain: float = 0.02):
    """Run the ladder 32..512 with stub rungs; return (rungs run, rungs skipped with reasons, ladder.json)."""
    fits = {}
    gate = LadderGate("model.n_embd", fit_of=lambda rids: fits[rids[0]], min_gain=min_gain)
    ran, skipped = [], {}

    def run_point(key, params, label, group):
        w = params["overrides"]["model.n_embd"]
        fits[f"run-{w}"] = fit_sigmoid(*curve(w, seed=40 + w, flat=flat))
        gate.done[float(w)] = [f"run-{w}"]
        ran.append(w)
        return "FINISHED"

    todo = [(f"k{w}", {"overrides": {"model.n_embd": w}}, f"w{w}", f"w{w}") for w in reversed(WIDTHS)]  # any order in
    values = {k: float(p["overrides"]["model.n_embd"]) for k, p, *_ in todo}
    statuses = run_ladder(todo, values, gate, run_point, lambda k, why: skipped.__setitem__(k, why))
    assert statuses == ["FINISHED"] * len(ran)
    return ran, skipped, json.loads(gate.save(tmp_path).read_text())


def test_a_ladder_whose_next_rung_is_predicted_not_worth_it_stops(tmp_path):
    ran, skipped, saved = climb(flat=True, tmp_path=tmp_path)
    assert ran == WIDTHS[:3]  # the fourth rung was predicted first, and not worth it
    assert set(skipped) == {"k256", "k512"}
    assert all(why.startswith("ladder stopped before model.n_embd=256: not worth it") for why in skipped.values())
    last = saved["decisions"][-1]
    assert last["rung"] == 256 and last["run"] is False and "A_ci" in last["prediction"]


def test_a_ladder_that_keeps_paying_climbs_to_the_top(tmp_path):
    ran, skipped, saved = climb(flat=False, tmp_path=tmp_path)
    assert ran == WIDTHS and not skipped
    assert [d["run"] for d in saved["decisions"]] == [True] * 5


def test_a_seeded_ladder_decides_once_a_rung_and_fits_its_seeds_jointly():
    from workbench.runs.report import fit_curves

    curves, fitted = {}, []
    gate = LadderGate("model.n_embd", fit_of=lambda rids: fitted.append(len(rids)) or fit_curves([curves[r] for r in rids]), min_gain=0.02)
    ran, skipped = [], {}

    def run_point(key, params, label, group):
        w, seed = params["overrides"]["model.n_embd"], params["seed"]
        curves[key] = curve(w, seed=40 + w + 100 * seed, flat=True)
        gate.done.setdefault(float(w), []).append(key)
        ran.append((w, seed))
        return "FINISHED"

    todo = [(f"k{w}s{s}", {"overrides": {"model.n_embd": w}, "seed": s}, f"w{w}/seed={s}", f"w{w}") for w in WIDTHS for s in (0, 1)]
    values = {k: float(p["overrides"]["model.n_embd"]) for k, p, *_ in todo}
    run_ladder(todo, values, gate, run_point, lambda k, why: skipped.__setitem__(k, why))
    assert ran == [(w, s) for w in WIDTHS[:3] for s in (0, 1)]  # each rung's two seeds, then the stop
    assert set(skipped) == {"k256s0", "k256s1", "k512s0", "k512s1"}
    assert [d["rung"] for d in gate.log] == [32, 64, 128, 256]  # one decision a rung, before its first seed
    assert set(fitted) == {2}  # every finished rung fitted from both its seeds
    # a sweep resumed mid-rung finishes that rung's seeds without judging it again
    gate.log.clear()
    ran.clear()
    gate.done = {32.0: gate.done[32.0], 64.0: gate.done[64.0], 128.0: ["k128s0"]}
    run_ladder(todo[5:6], values, gate, run_point, lambda k, why: None)
    assert ran == [(128, 1)] and gate.log == [{"rung": 128, "resumed": True}]  # on record in ladder.json


def test_a_grid_that_is_not_a_ladder_is_refused():
    pts = [{"overrides": {"model.n_embd": w}} for w in (32, 64, 64)]
    with pytest.raises(UserError, match=r"two points set the same value.*\(use --seeds N for seeds\)"):
        check_ladder(Grid("g", pts, ["a", "b", "c"]), "model.n_embd", stop_early=False)
    with pytest.raises(UserError, match=r"1 rung\(s\); a ladder needs rungs"):
        check_ladder(Grid("g", pts[1:], ["b", "c"], groups=["b", "b"]), "model.n_embd", stop_early=False)
    with pytest.raises(UserError, match="point a does not set train.lr"):
        check_ladder(Grid("g", pts[:2], ["a", "b"]), "train.lr", stop_early=False)
    with pytest.raises(UserError, match="drop --stop-early"):
        check_ladder(Grid("g", pts[:2], ["a", "b"]), "model.n_embd", stop_early=True)
    # --seeds 2: each rung twice, sharing its point's group; two rungs at one value are still refused
    seeded = Grid("g", [p for p in pts[:2] for _ in (0, 1)], ["a/seed=0", "a/seed=1", "b/seed=0", "b/seed=1"], groups=["a", "a", "b", "b"])
    check_ladder(seeded, "model.n_embd", stop_early=False)
    with pytest.raises(UserError, match=r"one rung per value$"):  # --seeds given: no hint to use it
        check_ladder(Grid("g", [p for p in pts for _ in (0, 1)], [f"{g}/seed={i}" for g in "abc" for i in (0, 1)],
                          groups=[g for g in "abc" for _ in (0, 1)]), "model.n_embd", stop_early=False)


class _Manifest:
    """The runner's manifest, as far as the ladder uses it (data, update)."""

    def __init__(self):
        self.data = {"points": {}}

    def update(self, key, **entry):
        self.data["points"].setdefault(key, {}).update(entry)


@pytest.mark.slow  # a real SQLite MLflow store: each stub rung logs its curve there, climb reads it back
def test_climb_reads_the_rungs_back_from_mlflow_and_records_the_stop(tmp_path):
    from workbench.sweep.ladder import climb
    from workbench.tracking.mlflow_sink import MlflowSink
    from workbench.tracking.store import create_run

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ctx = {"manifest": _Manifest(), "uri": uri, "out_dir": tmp_path}

    def run_point(ctx, key, params, label, group):
        w = params["overrides"]["model.n_embd"]
        rid = create_run("ladder", label, tracking_uri=uri)
        sink = MlflowSink(rid, uri)
        for step, (c, y) in enumerate(zip(*curve(w, seed=50 + w, flat=True))):
            sink.log_metrics({"compute/flops": float(c), "val/pass_rate": float(y)}, step=step)
        sink.close("FINISHED")
        ctx["manifest"].update(key, status="FINISHED", run_id=rid, params=params, label=label)
        return "FINISHED"

    class Bar:
        n = 0

        def update(self, k):
            Bar.n += k

    todo = [(f"k{w}", {"overrides": {"model.n_embd": w}}, f"w{w}", f"w{w}") for w in WIDTHS]
    failures = climb(ctx, todo, "model.n_embd", run_point, Bar(), min_gain=0.02, budget=None, x="compute/flops",
                     metric="val/pass_rate", fit_from=None)
    points = ctx["manifest"].data["points"]
    assert failures == 0 and Bar.n == len(WIDTHS)
    assert [points[f"k{w}"]["status"] for w in WIDTHS] == ["FINISHED"] * 3 + ["STOPPED"] * 2
    assert points["k512"]["run_id"] is None and "not worth it" in points["k512"]["stopped_reason"]
    saved = json.loads((tmp_path / "ladder.json").read_text())
    assert saved["key"] == "model.n_embd" and saved["decisions"][-1]["run"] is False


def test_the_cli_refuses_a_grid_that_is_not_a_ladder_in_one_line_and_writes_nothing(tmp_path, capsys):
    from tests.test_sweep import CURVE_NB
    from workbench.cli import main

    grid = tmp_path / "grid.yaml"
    grid.write_text("grid: {recipe: [a, b]}\n")
    code = main(["sweep", str(CURVE_NB), "--grid", str(grid), "--kernel", "python3", "--out", str(tmp_path / "out"),
                 "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", "--ladder", "model.n_embd"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "does not set model.n_embd" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists() and not (tmp_path / "mlflow.db").exists()
    assert main(["sweep", str(CURVE_NB), "--grid", str(grid), "--min-gain", "0.05"]) == 2
    assert "--min-gain only applies with --ladder" in capsys.readouterr().err


@pytest.mark.slow  # real papermill executions (the workbench kernel) of a synthetic rung notebook, real MLflow
def test_the_cli_climbs_a_ladder_through_papermill_and_stops_where_the_next_rung_does_not_pay(tmp_path, workbench_kernel, capsys):
    from tests.test_sweep import DATA
    from workbench.cli import main

    grid = tmp_path / "ladder.yaml"
    grid.write_text("name: ladder\nexperiment: ladder\npoints:\n" + "".join(f"  - {{overrides: {{model.n_embd: {w}}}}}\n" for w in WIDTHS))
    out, uri = tmp_path / "out", f"sqlite:///{tmp_path / 'mlflow.db'}"
    code = main(["sweep", str(DATA / "ladder_notebook.ipynb"), "--grid", str(grid), "--kernel", workbench_kernel, "--out", str(out),
                 "--tracking-uri", uri, "--ladder", "model.n_embd", "--x", "compute/flops", "--min-gain", "0.02",
                 "--no-progress", "--no-chart"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    points = json.loads((out / "manifest.json").read_text())["points"].values()
    status = {p["params"]["overrides"]["model.n_embd"]: p["status"] for p in points}
    assert status == {32: "FINISHED", 64: "FINISHED", 128: "FINISHED", 256: "STOPPED", 512: "STOPPED"}
    executed = sorted(f.name.split("-")[0] for f in (out / "points").glob("*.ipynb"))  # papermill's output notebooks
    assert executed == ["model.n_embd=128", "model.n_embd=32", "model.n_embd=64"]
    saved = json.loads((out / "ladder.json").read_text())
    assert [d["rung"] for d in saved["decisions"]][-1] == 256 and saved["decisions"][-1]["run"] is False
    assert "not worth it" in printed


def test_the_shipped_ladders_are_ladders_the_ablation_notebook_runs():
    from tests.test_sweep import ROOT
    from workbench.sweep.grid import load_grid, notebook_parameters, validate_grid

    declared = notebook_parameters(ROOT / "notebooks" / "ablation.ipynb")
    for name, key in (("ladder.yaml", "train.prompts_per_step"), ("ladder_generations.yaml", "train.generations_per_prompt")):
        grid = load_grid(ROOT / "sweeps" / name)
        validate_grid(grid, declared, ROOT / "notebooks" / "ablation.ipynb")
        check_ladder(grid, key, stop_early=False)
        assert len(grid.points) >= 5  # 3 to predict from, then rungs to predict
