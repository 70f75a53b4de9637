"""`workbench findings`: a study's table from a real MLflow experiment or a study folder, and its
curves written out as the folder that ships in git."""

from __future__ import annotations

import mlflow
import pytest

from tests.helpers.drawn_curves import draw_runs
from workbench.cli import main
from workbench.runs.study import study_from_folder

RECIPES = {"scalerl": (0.60, 2.0), "scalerl-loo-loss-dapo": (0.48, 2.0), "scalerl-loo-agg-token": (0.60, 2.0)}


def _log(tracking_uri: str, experiment: str) -> None:
    client = mlflow.MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name(experiment).experiment_id
    for i, (recipe, (A, B)) in enumerate(RECIPES.items()):
        for c, y in draw_runs(A, B, seed=i, n=2, points=30):
            run = client.create_run(exp, run_name=recipe)
            client.log_param(run.info.run_id, "recipe.name", recipe)
            for step, (x, score) in enumerate(zip(c, y)):
                client.log_metric(run.info.run_id, "compute/flops", float(x) * 1e12, step=step)
                client.log_metric(run.info.run_id, "val/pass_rate", float(score), step=step)
            client.set_terminated(run.info.run_id)
    failed = client.create_run(exp, run_name="crashed")  # a failed run is not part of the study
    client.log_param(failed.info.run_id, "recipe.name", "scalerl")
    client.log_metric(failed.info.run_id, "val/pass_rate", 0.9, step=0)
    client.set_terminated(failed.info.run_id, status="FAILED")


def test_the_table_from_mlflow_matches_the_one_from_its_exported_folder(tracking_uri, experiment, tmp_path, capsys):
    _log(tracking_uri, experiment)
    folder = tmp_path / "loo"
    args = ["findings", "--experiment", experiment, "--tracking-uri", tracking_uri, "--no-early",
            "--left-out", "scalerl-loo-length-penalty=the builtin tokenizer cannot spell the phrase",
            "--export", str(folder), "--provenance", "drawn curves, test"]
    assert main(args) == 0
    from_mlflow = capsys.readouterr().out
    assert "study: scalerl x2, scalerl-loo-loss-dapo x2, scalerl-loo-agg-token x2" in from_mlflow
    assert "| DAPO loss instead of CISPO (scalerl-loo-loss-dapo) | 2 |" in from_mlflow and "| agrees:" in from_mlflow
    assert "left out: the builtin tokenizer cannot spell the phrase" in from_mlflow
    assert sorted(study_from_folder(folder)) == sorted(RECIPES) and (folder / "README.md").read_text() == "drawn curves, test\n"
    out_md = tmp_path / "findings.md"
    assert main(["findings", "--curves", str(folder), "--no-early", "--markdown-out", str(out_md),
                 "--left-out", "scalerl-loo-length-penalty=the builtin tokenizer cannot spell the phrase"]) == 0
    from_folder = capsys.readouterr().out
    # the folder holds the curves at 6 significant digits: the same table, recomputed
    assert from_folder.split("\n", 1)[1] == from_mlflow.split("\n", 2)[2] and out_md.read_text() == from_folder


@pytest.mark.parametrize("args,needle", [
    (["--curves", "nowhere"], "study folder nowhere does not exist"),
    (["--curves", ".", "--left-out", "x"], "--left-out takes RECIPE=WHY"),
    (["--curves", ".", "--export", "out"], "--export needs --provenance"),
])
def test_bad_input_is_one_line(args, needle, capsys):
    assert main(["findings", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and needle in err


def _stop_early_sweep(folder, *, stop_early=True, dapo_status="STOPPED"):
    """An out folder as `workbench sweep --stop-early` leaves it (manifest.json, after its compute account)."""
    import json

    points = {}
    for recipe in RECIPES:
        for seed in range(2):
            stopped = recipe == "scalerl-loo-loss-dapo" and seed == 0
            points[f"{recipe}{seed}"] = {
                "label": f"{recipe}/seed={seed}", "group": recipe, "params": {"recipe": recipe, "seed": seed},
                "status": dapo_status if stopped else "FINISHED", "stopped_reason": "A's interval below the best's" if stopped else None,
                "compute_spent": 1.0 if stopped else 4.0, "compute_unspent": 3.0 if stopped else 0.0}
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({"points": points, "stop_early": stop_early}))
    return folder


def test_stop_early_is_scored_and_its_record_ships_with_the_study(tmp_path, capsys):
    folder = tmp_path / "loo"
    from workbench.runs.study import write_study

    study = {r: [(c, y) for c, y in draw_runs(A, B, seed=i, n=2, points=30)] for i, (r, (A, B)) in enumerate(RECIPES.items())}
    write_study(study, folder, provenance="drawn")
    sweep = _stop_early_sweep(tmp_path / "sweep")
    shipped = tmp_path / "shipped"
    assert main(["findings", "--curves", str(folder), "--no-early", "--stop-early-sweep", str(sweep),
                 "--export", str(shipped), "--provenance", "drawn"]) == 0
    line = [ln for ln in capsys.readouterr().out.splitlines() if "stop-early" in ln]
    # 3 of 24 compute units unspent; one of DAPO's two runs stopped, and with 3 recipes the top 3 holds every one
    assert line == ["- stop-early on the same grid saved 12% of its compute, stopping 1 of 6 runs; it dropped 0 of 3 recipes "
                    "(every run stopped); it stopped some runs of scalerl-loo-loss-dapo; it dropped none of the full runs' "
                    "top 3 (scalerl, scalerl-loo-agg-token, scalerl-loo-loss-dapo), but stopped runs of scalerl-loo-loss-dapo"], line
    assert (shipped / "stop_early.json").is_file()
    assert main(["findings", "--curves", str(shipped), "--no-early"]) == 0  # the shipped record is read back
    assert [ln for ln in capsys.readouterr().out.splitlines() if "stop-early" in ln] == line


@pytest.mark.parametrize("kw,needle", [({"stop_early": False}, "ran without --stop-early"),
                                       ({"dapo_status": "RUNNING"}, "the sweep has not finished (1 of 6 points")])
def test_a_stop_early_sweep_that_cannot_be_scored_is_one_line(tmp_path, capsys, kw, needle):
    from workbench.runs.study import write_study

    write_study({r: draw_runs(A, B, seed=i, n=2, points=30) for i, (r, (A, B)) in enumerate(RECIPES.items())}, tmp_path / "loo",
                provenance="drawn")
    sweep = _stop_early_sweep(tmp_path / "sweep", **kw)
    assert main(["findings", "--curves", str(tmp_path / "loo"), "--no-early", "--stop-early-sweep", str(sweep)]) == 2
    assert needle in capsys.readouterr().err
