"""Run folders, saved configs, overrides and recipe swaps."""

from __future__ import annotations

import json

import pytest

from workbench.configtools import to_dict
from workbench.errors import UserError
from workbench.runs.folder import default_config_path, override_items, run_folder, saved_config, swap_recipe


def test_default_config_is_the_projects_quickstart():
    path = default_config_path()
    assert path is not None and path.name == "quickstart.yaml" and path.parent.name == "configs"


def test_overrides_as_dict_or_strings():
    assert override_items(["train.lr=0.0001", "recipe=qwen-dapo"]) == {"train.lr": 1e-4, "recipe": "qwen-dapo"}
    assert override_items({"seed": 3}) == {"seed": 3} and override_items(None) == {}
    with pytest.raises(UserError, match="key=value"):
        override_items(["train.lr"])
    with pytest.raises(UserError, match="overrides must be"):
        override_items(3)  # type: ignore[arg-type]


def test_swap_recipe_keeps_local_tweaks_the_new_preset_does_not_change():
    local = {"base": "scalerl", "length_control": {"type": "none"}, "loss": {"eps_max": 5.0}}
    assert swap_recipe(local, "scalerl-loo-no-fp32") == {"base": "scalerl-loo-no-fp32", "length_control": {"type": "none"},
                                                         "loss": {"eps_max": 5.0}}
    assert swap_recipe(local, "scalerl-loo-length-penalty") == {"base": "scalerl-loo-length-penalty", "loss": {"eps_max": 5.0}}
    assert swap_recipe("scalerl", "qwen-dapo") == "qwen-dapo" and swap_recipe(None, "gspo") == "gspo"


def test_run_folder_by_path_or_by_name(run_folder, tmp_path, monkeypatch):
    folder = run_folder(2)
    assert run_folder_of(folder) == folder.resolve()
    project = tmp_path / "proj"
    (project / "runs").mkdir(parents=True)
    (project / "pyproject.toml").write_text("")
    folder.rename(project / "runs" / "mine")
    monkeypatch.chdir(project)
    assert run_folder_of("mine") == project / "runs" / "mine"
    with pytest.raises(UserError, match="no run in"):
        run_folder_of("other")


def run_folder_of(target):
    return run_folder(target)


def test_saved_config_from_config_json_or_the_checkpoint(run_folder, tmp_path):
    folder = run_folder(2, every=5)
    assert saved_config(folder).eval.every_steps == 5
    data = json.loads((folder / "config.json").read_text())
    (folder / "config.json").unlink()
    ck = folder / "checkpoints" / "step_000005"
    ck.mkdir(parents=True)
    (ck / "state.json").write_text(json.dumps({"config": data}))
    (folder / "checkpoints" / "LATEST").write_text("step_000005")
    assert to_dict(saved_config(folder)) == data
    assert saved_config(tmp_path / "empty") is None
