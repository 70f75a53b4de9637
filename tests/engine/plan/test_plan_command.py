"""`workbench plan` as a user runs it, and the same plan refusing a launch before any actor starts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from workbench.cli import main
from workbench.config import run_config_from_dict
from workbench.errors import UserError

REPO = Path(__file__).resolve().parents[3]
QWEN7B = REPO / "tests" / "data" / "model_configs" / "qwen2.5-7b"


def plan(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["plan", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_the_quickstart_plan_runs_here_and_fits(capsys):
    rc, out, _ = plan(capsys, "--config", str(REPO / "configs" / "quickstart.yaml"))
    assert rc == 0 and out.rstrip().endswith("verdict: fits")
    assert "trainer on host" in out and "all actors on host" in out and "AdamW states (fp32)" in out


def test_qwen7b_on_8x80gb_fits_and_on_24gb_names_the_term_and_the_fix(capsys):
    rc, out, _ = plan(capsys, "--model", str(QWEN7B), "--gpus-per-node", "8", "--gpu-memory", "80",
                      "--set", "train.gradient_checkpointing=true")  # fmt: skip
    assert rc == 0 and "verdict: fits" in out
    assert "7.616B parameters" in out and "fp32 head copy" in out and "sequences of" in out and "1 GPU each (x4)" in out
    rc, out, _ = plan(capsys, "--model", str(QWEN7B), "--gpus-per-node", "8", "--gpu-memory", "24",
                      "--set", "train.gradient_checkpointing=true")  # fmt: skip
    verdict = out.strip().splitlines()[-1]
    assert rc == 1 and verdict.startswith("verdict: does not fit: the trainer needs")
    assert "largest term: AdamW states (fp32)" in verdict and "resources.trainer_workers=" in verdict


@pytest.mark.parametrize("argv, says", [
    (["--gpu-memory", "lots"], "--gpu-memory: 'lots' is not a number of GB"),
    (["--gpu-memory", "0"], "is not a GPU's memory"),
    (["--gpus-per-node", "0", "--gpu-memory", "80"], "--gpus-per-node: 0 GPUs cannot hold a run"),
    (["--gpus-per-node", "8"], "--gpus-per-node needs --gpu-memory"),
])  # fmt: skip
def test_bad_cluster_figures_are_one_line(capsys, argv, says):
    rc, out, err = plan(capsys, "--model", str(QWEN7B), *argv)
    assert rc == 2 and out == "" and says in err and len(err.strip().splitlines()) == 1


def test_a_model_folder_without_config_json_is_one_line(capsys, tmp_path):
    rc, _, err = plan(capsys, "--model", str(tmp_path))
    assert rc == 2 and "has no config.json" in err and len(err.strip().splitlines()) == 1


def model_dir_7b(tmp_path: Path) -> Path:
    """Qwen2.5-7B's config.json with a small tokenizer and an empty weights file: the preflight reads
    the config and tokenizer only (meta device), so no 15 GB of weights are needed to be refused."""
    from workbench.engine.model.builtin import build_char_tokenizer

    d = tmp_path / "qwen7b"
    d.mkdir()
    shutil.copy(QWEN7B / "config.json", d / "config.json")
    build_char_tokenizer("0123456789+=").save_pretrained(d)
    (d / "model.safetensors").write_bytes(b"")
    return d


def test_a_launch_whose_plan_does_not_fit_is_refused_before_any_actor_starts(tmp_path, ray_cluster):
    from workbench.engine.plan import guard
    from workbench.engine.run.launch import launch

    cfg = run_config_from_dict({}, {"name": "too-big", "out_dir": str(tmp_path / "run"), "model.path": str(model_dir_7b(tmp_path)),
                                    "task.num_train": 40, "task.num_val": 20, "eval.num_prompts": 10,
                                    "recipe.length_control.type": "none"})  # fmt: skip
    with pytest.raises(UserError, match=r"the memory plan does not fit: the .* needs .* GB on host .*resources.plan_check=false"):
        launch(cfg)
    names = [a["name"] for a in ray_cluster.util.list_named_actors(all_namespaces=True)]
    assert not [n for n in names if n.startswith("too-big")]
    assert guard(run_config_from_dict({}, {"model.path": cfg.model.path,
                                           "task.num_train": 40, "task.num_val": 20, "eval.num_prompts": 10,
                                           "resources.plan_check": False})) is None  # the override
