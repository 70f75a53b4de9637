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
