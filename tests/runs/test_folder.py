"""Run folders, saved configs, overrides and recipe swaps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.configtools import load_yaml, to_dict
from workbench.errors import UserError
from workbench.rl.recipe import swap_recipe
from workbench.runs.folder import (
    attached_config, default_config_path, has_checkpoint, override_items, read_summary, resolve_config, run_folder,
    saved_config, with_max_steps,
)  # fmt: skip


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
    with pytest.raises(UserError, match="a str or Path"):
        run_folder_of(5)


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


@pytest.mark.parametrize("text, fragment", [("{oops", "is not valid JSON"), ("{}", "holds no run config"), ("[1]", "holds no run config")])
def test_a_broken_config_json_is_named(run_folder, text, fragment):
    folder = run_folder(2)
    (folder / "config.json").write_text(text)
    with pytest.raises(UserError, match=fragment) as e:
        saved_config(folder)
    assert str(folder / "config.json") in str(e.value)


def test_an_unknown_key_in_config_json_names_the_file(run_folder):
    folder = run_folder(2)
    data = json.loads((folder / "config.json").read_text())
    data["train"]["lrr"] = 1.0
    (folder / "config.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match=r"config\.json: .*train\.lrr"):
        saved_config(folder)


def test_resolve_config_defaults_names_and_out_dir(tmp_path, monkeypatch):
    from workbench.tracking.store import project_root

    cfg = resolve_config()
    base = load_yaml(default_config_path()).get("name", "quickstart")
    assert cfg.name.startswith(f"{base}-") and len(cfg.name.split("-")[-1]) == 4  # <config name>-<time>-<4 hex>
    assert Path(cfg.out_dir) == project_root() / "runs" / cfg.name
    named = resolve_config(overrides=["train.lr=0.5", f"out_dir={tmp_path}"], name="mine")
    assert (named.name, named.train.lr, named.out_dir) == ("mine", 0.5, str(tmp_path))


def test_resolve_config_recipe_swap_keeps_the_files_adjustments():
    cfg = resolve_config(recipe="scalerl-loo-no-fp32")
    local = load_yaml(default_config_path()).get("recipe")
    assert cfg.recipe == resolve_config(overrides={"recipe": swap_recipe(local, "scalerl-loo-no-fp32")}).recipe


def test_resolve_config_refuses_bad_input(tmp_path):
    with pytest.raises(UserError, match="config file not found"):
        resolve_config(tmp_path / "nope.yaml")
    for bad in ("", "a/b"):
        with pytest.raises(UserError, match="must be non-empty and contain no '/'"):
            resolve_config(name=bad)
    with pytest.raises(UserError, match="overrides must be"):
        resolve_config(overrides="train.lr=1")


def test_read_summary_waits_for_the_file(tmp_path):
    import threading

    assert read_summary(tmp_path) is None
    threading.Timer(0.3, lambda: (tmp_path / "summary.json").write_text('{"status": "finished"}')).start()
    assert read_summary(tmp_path, wait=10.0) == {"status": "finished"}


def test_read_summary_waits_out_a_half_written_file_then_names_a_broken_one(tmp_path):
    import threading

    path = tmp_path / "summary.json"
    path.write_text("")  # the moment between a plain writer's open and its write
    threading.Timer(0.3, lambda: path.write_text('{"status": "finished"}')).start()
    assert read_summary(tmp_path, wait=10.0) == {"status": "finished"}
    path.write_text('{"status": "fin')
    with pytest.raises(UserError, match="summary.json is not valid JSON"):
        read_summary(tmp_path, wait=0.2)


def test_the_engine_writes_summary_json_whole_and_leaves_no_temporary(tmp_path):
    from workbench.engine.run.metrics import RunLog

    RunLog(tmp_path, sinks=[]).finish({"status": "finished", "steps": 3}, "finished")
    assert read_summary(tmp_path) == {"status": "finished", "steps": 3}
    assert sorted(p.name for p in tmp_path.iterdir() if "summary" in p.name) == ["summary.json"]


def test_step_target_checkpoint_and_attached_config(run_folder, tmp_path):
    path = run_folder(4)
    cfg = saved_config(path)
    assert with_max_steps(cfg, 7).train.max_steps == 7
    with pytest.raises(UserError, match="max_steps must be >= 1"):
        with_max_steps(cfg, 0)
    for bad in ("abc", 2.5, True):
        with pytest.raises(UserError, match="max_steps must be a whole number"):
            with_max_steps(cfg, bad)
    assert with_max_steps(cfg, 8.0).train.max_steps == 8
    assert not has_checkpoint(path)
    (path / "checkpoints").mkdir()
    (path / "checkpoints" / "LATEST").write_text("step_3")
    assert has_checkpoint(path)
    live = attached_config({"out_dir": str(path), "max_steps": 99}, "x")
    assert (live.name, live.train.max_steps) == (cfg.name, 99)  # the folder's config, the engine's target
    bare = attached_config({"out_dir": str(tmp_path / "empty")}, "gone")
    assert (bare.name, bare.out_dir) == ("gone", str(tmp_path / "empty"))
