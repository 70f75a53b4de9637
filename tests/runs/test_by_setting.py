"""workbench.runs.by_setting and `workbench predict`: runs from folders, MLflow (real SQLite) and CSVs,
and their bad inputs as one line. The runs are a synthetic width ladder: A linear in ln(width),
C_mid a power law, so the prediction at the largest width has a known truth."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.scaling.synthetic import synth
from workbench.errors import UserError
from workbench.runs.by_setting import load_runs, predict_runs, runs_from_csvs, runs_from_folders, runs_from_mlflow

WIDTHS = (32, 64, 128)
AT = 256


def law(w: float) -> dict[str, float]:
    return {"R0": 0.1, "A": 0.3 + 0.06 * np.log(w / 32), "C_mid": 2.0 * (w / 32) ** 0.7, "B": 1.5}


def rows(w: float, seed: int) -> list[dict]:
    c, y = synth(n=30, lo=0.2, hi=40.0 * (w / 32) ** 0.7, noise=0.015, seed=seed, params=law(w))
    return [{"step": i, "compute/device_hours": float(ci), "val/pass_rate": float(yi)} for i, (ci, yi) in enumerate(zip(c, y))]


def run_folder(base, w: float, seed: int, **config):
    f = base / f"w{w}"
    f.mkdir()
    cfg = {"name": f"w{w}", "seed": seed, "model": {"n_embd": w}, "train": {"max_steps": 30}, **config}
    (f / "config.json").write_text(json.dumps(cfg))
    (f / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows(w, seed)))
    return f


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    base = tmp_path_factory.mktemp("ladder")
    return [run_folder(base, w, seed=i) for i, w in enumerate(WIDTHS)]


def test_folders_predict_the_unseen_width(folders):
    runs = runs_from_folders(folders, "model.n_embd")
    assert sorted(runs.fits) == list(WIDTHS) and runs.names[64] == "w64"
    p = predict_runs(runs, AT, n_draws=200)
    assert p.A_ci[0] <= law(AT)["A"] <= p.A_ci[1] and p.C_mid_ci[0] <= law(AT)["C_mid"] <= p.C_mid_ci[1]
    assert "w128" in p.summary()


def test_folders_that_differ_in_another_key_or_lack_the_key_or_a_fit_are_refused(tmp_path, folders):
    odd = run_folder(tmp_path, 256, seed=5, train={"max_steps": 30, "lr": 1e-3})
    with pytest.raises(UserError, match="differ in train.lr as well as model.n_embd"):
        runs_from_folders([*folders, odd], "model.n_embd")
    with pytest.raises(UserError, match="no run's config has the key 'model.n_emb'.*close: model.n_embd"):
        runs_from_folders(folders, "model.n_emb")
    short = tmp_path / "short"
    short.mkdir()
    (short / "config.json").write_text(json.dumps({"name": "short", "model": {"n_embd": 256}, "train": {"max_steps": 30}}))
    (short / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows(256, 1)[:3]))
    with pytest.raises(UserError, match="run .*short was not fitted: only 2 evaluation"):
        runs_from_folders([*folders, short], "model.n_embd")
    # the seed and how a run executes (its name, out_dir, max_steps) may differ
    assert len(runs_from_folders(folders, "model.n_embd").fits) == 3


def params_of(w: float) -> int:
    return int(12 * w * w + 100 * w)  # a one-layer GPT's count: it grows with the width


def test_folders_predict_along_the_parameter_count_whatever_model_keys_set_it(tmp_path, folders):
    for f, w in zip(folders, WIDTHS):
        (f / "summary.json").write_text(json.dumps({"status": "finished", "model/params": params_of(w)}))
    try:
        runs = runs_from_folders(folders, "model.params")  # the runs differ in model.n_embd: that sets the count
        assert sorted(runs.fits) == [params_of(w) for w in WIDTHS]
        p = predict_runs(runs, params_of(AT), n_draws=200)
        assert p.A_ci[0] <= law(AT)["A"] <= p.A_ci[1]
        odd = run_folder(tmp_path, 256, seed=5, train={"max_steps": 30, "lr": 1e-3})
        (odd / "summary.json").write_text(json.dumps({"status": "finished", "model/params": params_of(256)}))
        with pytest.raises(UserError, match="differ in train.lr as well as model.params"):
            runs_from_folders([*folders, odd], "model.params")
        (folders[0] / "summary.json").unlink()
        with pytest.raises(UserError, match=r"w32 has no parameter count \(model/params in its summary.json\)"):
            runs_from_folders(folders, "model.params")
    finally:
        for f in folders:
            (f / "summary.json").unlink(missing_ok=True)


@pytest.mark.slow  # a real SQLite MLflow store with 4 runs
def test_mlflow_runs_by_experiment_and_filter(tmp_path):
    from workbench.tracking.mlflow_sink import MlflowSink
    from workbench.tracking.store import create_run

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    for i, w in enumerate(WIDTHS + (512,)):
        rid = create_run("ladder", f"w{w}", tracking_uri=uri)
        sink = MlflowSink(rid, uri)
        sink.log_config({"model": {"n_embd": w}, "task": {"name": "addition" if w < 512 else "countdown"}})
        sink.set_tags({"model.params": str(params_of(w))})  # as the coordinator tags a run
        for r in rows(w, i):
            sink.log_metrics({k: v for k, v in r.items() if k != "step"}, step=r["step"])
        sink.close("FINISHED")
    with pytest.raises(UserError, match="differ in task.name"):
        runs_from_mlflow("ladder", "model.n_embd", tracking_uri=uri)
    runs = runs_from_mlflow("ladder", "model.n_embd", where={"task.name": "addition"}, tracking_uri=uri)
    assert sorted(runs.fits) == list(WIDTHS) and runs.names[32] == "w32"
    with pytest.raises(UserError, match="no run of the experiment has the key 'train.prompts_per_step'"):
        runs_from_mlflow("ladder", "train.prompts_per_step", where={"task.name": "addition"}, tracking_uri=uri)
    p = predict_runs(runs, AT, n_draws=200)
    assert p.A_ci[0] <= law(AT)["A"] <= p.A_ci[1]
    by_count = runs_from_mlflow("ladder", "model.params", where={"task.name": "addition"}, tracking_uri=uri)
    assert sorted(by_count.fits) == [params_of(w) for w in WIDTHS]
    untagged = create_run("ladder", "w16-before-counts", tracking_uri=uri)  # a run from before the count was tagged
    sink = MlflowSink(untagged, uri)
    sink.log_config({"model": {"n_embd": 16}, "task": {"name": "addition"}})
    for r in rows(16, 9):
        sink.log_metrics({k: v for k, v in r.items() if k != "step"}, step=r["step"])
    sink.close("FINISHED")
    with pytest.raises(UserError, match=r"run w16-before-counts: model.params = nan is not a number"):
        runs_from_mlflow("ladder", "model.params", where={"task.name": "addition"}, tracking_uri=uri)
    # seeds: the logged seed parameter tells a value's seeds (fitted jointly) from a copy of one run
    for name, w, seed, noise_seed in (("a0", 32, 0, 20), ("a1", 32, 1, 21), ("b0", 64, 0, 22), ("c0", 128, 0, 23),
                                      ("b0-again", 64, 0, 22)):
        rid = create_run("seeded", name, tracking_uri=uri)
        sink = MlflowSink(rid, uri)
        sink.log_config({"seed": seed, "model": {"n_embd": w}})
        for r in rows(w, noise_seed):
            sink.log_metrics({k: v for k, v in r.items() if k != "step"}, step=r["step"])
        if name != "b0-again":  # the copy stays RUNNING (not read) until it is closed below
            sink.close("FINISHED")
    seeded = runs_from_mlflow("seeded", "model.n_embd", tracking_uri=uri)
    assert sorted(seeded.names[32].split(" + ")) == ["a0", "a1"] and len(seeded.fits[32].run_names) == 2
    assert seeded.names[64] == "b0"
    MlflowSink(rid, uri).close("FINISHED")
    with pytest.raises(UserError, match=r"both have model.n_embd = 64 and seed 0: two copies of one run"):
        runs_from_mlflow("seeded", "model.n_embd", tracking_uri=uri)


def write_csv(path, w, seed, column=None):
    lines = ["compute,pass_rate" + (f",{column}" if column else "")]
    lines += [f"{r['compute/device_hours']},{r['val/pass_rate']}" + (f",{w}" if column else "") for r in rows(w, seed)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_csvs_by_file_name_or_column(tmp_path):
    named = [write_csv(tmp_path / f"ladder_model.n_embd={w}.csv", w, i) for i, w in enumerate(WIDTHS)]
    runs = runs_from_csvs(named, "model.n_embd")
    assert sorted(runs.fits) == list(WIDTHS) and runs.names[32] == "ladder_model.n_embd=32.csv"
    cols = [write_csv(tmp_path / f"run{i}.csv", w, i, column="model.n_embd") for i, w in enumerate(WIDTHS)]
    assert sorted(load_runs([str(p) for p in cols], "model.n_embd").fits) == list(WIDTHS)
    with pytest.raises(UserError, match="cannot tell its model.n_embd"):
        runs_from_csvs([*named[1:], write_csv(tmp_path / "curve.csv", 32, 0)], "model.n_embd")
    with pytest.raises(UserError, match="mix of CSV files and run folders"):
        load_runs([str(named[0]), str(tmp_path)], "model.n_embd")


def test_seeds_of_one_value_are_fitted_jointly_and_copies_are_refused(tmp_path, folders):
    files = [write_csv(tmp_path / f"model.n_embd={w}_seed={s}.csv", w, 10 * s + i) for i, w in enumerate(WIDTHS) for s in (0, 1)]
    runs = runs_from_csvs(files, "model.n_embd")
    assert sorted(runs.fits) == list(WIDTHS)
    assert runs.names[64] == "model.n_embd=64_seed=0.csv + model.n_embd=64_seed=1.csv"
    joint = runs.fits[64]
    assert len(joint.run_names) == 2 and joint.n == 2 * runs_from_csvs(files[2:3], "model.n_embd").fits[64].n
    p = predict_runs(runs, AT, n_draws=200)
    assert p.A_ci[0] <= law(AT)["A"] <= p.A_ci[1]
    with pytest.raises(UserError, match=r"run .*model.n_embd=32_seed=0.csv is given twice"):
        runs_from_csvs([*files, files[0]], "model.n_embd")
    renamed = tmp_path / "again_model.n_embd=64_seed=1.csv"  # a copy under another name: its seed gives it away
    renamed.write_bytes(files[3].read_bytes())
    with pytest.raises(UserError, match=r"both have model.n_embd = 64 and seed 1: two copies of one run"):
        runs_from_csvs([*files, renamed], "model.n_embd")
    unseeded = tmp_path / "model.n_embd=64.csv"  # no seed to read: the identical curve gives it away
    unseeded.write_bytes(files[3].read_bytes())
    with pytest.raises(UserError, match=r"model.n_embd=64.csv and model.n_embd=64_seed=1.csv have the same curve"):
        runs_from_csvs([*files, unseeded], "model.n_embd")
    with pytest.raises(UserError, match=r"run .*w32/\.\./w32 is given twice \(as .*w32\): give each run once"):
        runs_from_folders([*folders, f"{folders[0]}/../w32"], "model.n_embd")  # not silently fitted once
    copy = tmp_path / "copy"
    copy.mkdir()
    copy_of_w64 = run_folder(copy, 64, seed=1)  # folders[1] is w64 at seed 1
    with pytest.raises(UserError, match="w64 and w64 both have model.n_embd = 64 and seed 1: two copies of one run"):
        runs_from_folders([*folders, copy_of_w64], "model.n_embd")
    other_seed = tmp_path / "s7"
    other_seed.mkdir()
    both = runs_from_folders([*folders, run_folder(other_seed, 64, seed=7)], "model.n_embd")
    assert both.names[64] == "w64 (seed 1) + w64 (seed 7)" and len(both.fits[64].run_names) == 2


def test_a_rung_with_one_seed_is_warned_about_with_the_seeds_to_run(tmp_path, folders):
    alone = predict_runs(runs_from_folders(folders, "model.n_embd"), AT, n_draws=200)
    warning = next(w for w in alone.warnings if "one seed" in w)
    assert warning.startswith("each rung (value of model.n_embd) has one seed: ")
    assert "`workbench sweep NOTEBOOK --grid GRID.yaml --ladder model.n_embd --seeds 3`" in warning
    files = [write_csv(tmp_path / f"model.n_embd={w}_seed={s}.csv", w, 10 * s + i) for i, w in enumerate(WIDTHS) for s in (0, 1)]
    seeded = predict_runs(runs_from_csvs(files, "model.n_embd"), AT, n_draws=200)
    assert not any("one seed" in w for w in seeded.warnings)
    mixed = predict_runs(runs_from_csvs(files[1:], "model.n_embd"), AT, n_draws=200)  # width 32 keeps seed 1 only
    assert [w for w in mixed.warnings if "one seed" in w][0].startswith("the rungs model.n_embd = 32 have one seed each: ")
