"""Hub model ids, offline, through the real huggingface_hub on a cache seeded in the hub's own layout.

A tiny random Qwen2 is seeded as "Org/tiny" (models--Org--tiny/refs/main, snapshots/<sha>/, blobs/);
HF_HOME points at the temp dir and HF_HUB_OFFLINE=1. The id resolves on the driver to the snapshot
folder and its commit, which is what every actor receives; a node whose HF cache lacks that folder
reads the same commit from its own cache; a missing id, revision or folder is one line.
"""

from __future__ import annotations

import dataclasses

import pytest

from tests.helpers.hub_cache import offline_hub, seed_model
from tests.helpers.tiny_hf import build_tiny_hf
from workbench.config import run_config_from_dict
from workbench.engine.model.hf_dir import check_model_dir, load_tokenizer
from workbench.engine.model.hub import is_hub_id, resolve_model, snapshot_id
from workbench.engine.run.actors import actor_config, generator_parts, trainer_parts
from workbench.engine.run.preflight import absolute_paths
from workbench.errors import UserError
from workbench.tasks.base import load_task


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return build_tiny_hf(tmp_path_factory.mktemp("tiny"), "qwen2", corpus=["12+34=46", "7+8=15"])


@pytest.fixture
def hub(monkeypatch, tmp_path, tiny_model):
    """(HF_HOME, the snapshot folder of Org/tiny at main) with the cache seeded and the hub offline."""
    home = tmp_path / "hf"
    offline_hub(monkeypatch, home)
    return home, seed_model(home, "Org/tiny", tiny_model)


def cfg_for(path: str, tmp_path, **model):
    return run_config_from_dict({"out_dir": str(tmp_path / "run"), "model": {"path": path, **model},
                                 "task": {"name": "addition", "difficulty": 1, "num_train": 40, "num_val": 10},
                                 "eval": {"num_prompts": 10}})  # fmt: skip


def test_a_hub_id_resolves_from_the_seeded_cache_to_its_snapshot_and_commit(hub, tmp_path):
    home, snap = hub
    got = resolve_model("Org/tiny")
    assert got.folder == snap and got.commit == snap.name and got.revision == "main"
    cfg = absolute_paths(cfg_for("Org/tiny", tmp_path))
    assert cfg.model.path == str(snap) and cfg.model.revision == snap.name
    assert load_tokenizer(cfg.model.path).eos_token == "<|im_end|>"  # the snapshot is a loadable model folder


def test_a_revision_picks_its_commit(hub, tmp_path, tiny_model):
    home, main = hub
    v1 = seed_model(home, "Org/tiny", tiny_model, revision="v1", salt="another commit")
    assert v1.name != main.name
    assert resolve_model("Org/tiny", "v1").folder == v1
    assert resolve_model("Org/tiny", main.name).folder == main  # a commit sha names itself
    assert absolute_paths(cfg_for("Org/tiny", tmp_path, revision="v1")).model.revision == v1.name


@pytest.mark.parametrize("path,revision,needle", [
    ("Org/missing", None, "'Org/missing' (revision main) is no local folder, and not (completely) in the Hugging Face cache"),
    ("Org/tiny", "v9", "'Org/tiny' (revision v9) is no local folder"),
])  # fmt: skip
def test_a_missing_id_or_revision_offline_is_one_line_naming_it_and_how_to_get_it(hub, tmp_path, path, revision, needle):
    with pytest.raises(UserError) as e:
        absolute_paths(cfg_for(path, tmp_path, revision=revision))
    msg = str(e.value)
    assert needle in msg and "HF_HUB_OFFLINE is set" in msg and f"hf download {path}" in msg and "\n" not in msg


def test_a_local_folder_still_works_and_is_no_hub_id(hub, tmp_path, tiny_model, monkeypatch):
    monkeypatch.chdir(tiny_model.parent)
    cfg = absolute_paths(cfg_for(tiny_model.name, tmp_path))
    assert cfg.model.path == str(tiny_model) and cfg.model.revision is None
    assert not is_hub_id(tiny_model.name) and not is_hub_id("./x") and not is_hub_id("builtin:tiny")
    assert is_hub_id("Qwen/Qwen2.5-0.5B-Instruct") and is_hub_id("gpt2")
    with pytest.raises(UserError, match="model.revision='v1' is for hub ids, but model.path"):
        absolute_paths(cfg_for(str(tiny_model), tmp_path, revision="v1"))


def test_actors_receive_the_drivers_snapshot_folder_and_commit(hub, tmp_path):
    """The multi-node rule, driver side: resolved once; every role gets the same folder and commit."""
    home, snap = hub
    cfg = absolute_paths(cfg_for("Org/tiny", tmp_path))
    given = actor_config(cfg, load_task(cfg.task))
    for parts in (trainer_parts(given), generator_parts(given), generator_parts(given, evaluator=True)):
        assert (parts["model"].path, parts["model"].revision) == (str(snap), snap.name)
    assert snapshot_id(snap) == ("Org/tiny", snap.name)


def test_a_node_without_the_drivers_snapshot_reads_the_same_commit_from_its_own_cache(hub, tmp_path, tiny_model, monkeypatch):
    """The multi-node rule, actor side: the driver's folder is absent on this node (its HF cache is
    elsewhere); the node's cache holds main at a newer commit and the driver's commit too."""
    home, snap = hub
    driver_folder = tmp_path / "driver-hf" / snap.relative_to(home)  # what the driver resolved, not on this node
    seed_model(home, "Org/tiny", tiny_model, salt="newer main")  # main moved on here
    assert check_model_dir(driver_folder) == snap  # the driver's commit, not the node's main
    gone = dataclasses.replace(resolve_model("Org/tiny"), folder=driver_folder)
    other = tmp_path / "other-hf"
    offline_hub(monkeypatch, other)  # a node whose cache lacks that commit: one line naming it
    with pytest.raises(UserError, match=f"'Org/tiny' \\(revision {snap.name}\\) is no local folder"):
        check_model_dir(gone.folder)


def test_the_plan_of_a_hub_id_reads_its_config_not_its_weights(monkeypatch, tmp_path):
    from pathlib import Path

    from workbench.engine.plan import plan_for
    from workbench.engine.plan.memory import GB, Cluster

    home = tmp_path / "hf"
    offline_hub(monkeypatch, home)
    shipped = Path(__file__).resolve().parents[2] / "data" / "model_configs" / "qwen2.5-7b"
    seed_model(home, "Qwen/Qwen2.5-7B-Instruct", shipped)  # config.json alone: no weights in the cache
    cfg = cfg_for("Qwen/Qwen2.5-7B-Instruct", tmp_path)
    plan = plan_for(cfg, Cluster(8, 80 * GB), prompt=512)
    assert plan.shape.params == pytest.approx(7.61e9, rel=0.01)
    missing = cfg_for("Qwen/Not-There", tmp_path)
    with pytest.raises(UserError, match="'Qwen/Not-There'.*hf download Qwen/Not-There"):
        plan_for(missing, Cluster(8, 80 * GB), prompt=512)
