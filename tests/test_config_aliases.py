"""TRL's and verl's names: every mapped key is a real RunConfig key, and a TRL or verl name in a
YAML file, a --set or a Session's overrides is refused with its workbench key."""

from __future__ import annotations

import pytest

from workbench.cli import main
from workbench.commands.config import config_keys
from workbench.config import load_run_config
from workbench.config_aliases import ALIASES, alias_for
from workbench.configtools import ConfigError


def refusal(path=None, overrides=None) -> str:
    with pytest.raises(ConfigError) as e:
        load_run_config(path, overrides)
    return str(e.value)


def test_every_mapped_key_is_a_runconfig_key_and_takes_its_default():
    keys = {k.key: k for k in config_keys() if not k.section}
    for a in ALIASES:
        if a.ours is None:
            assert a.note, f"{a.tool}'s {a.theirs}: no workbench key and no note saying what to do"
            continue
        assert a.ours in keys, f"{a.tool}'s {a.theirs} -> {a.ours}: not a RunConfig key"
        cfg = load_run_config(None, {a.ours: keys[a.ours].default})  # settable as written
        assert cfg is not None


def test_the_table_covers_the_names_users_type_first():
    mapped = {(a.tool, a.theirs): a.ours for a in ALIASES}
    assert len([a for a in ALIASES if a.ours]) >= 15
    assert mapped[("TRL", "learning_rate")] == "train.lr"
    assert mapped[("TRL", "beta")] == "recipe.loss.kl_coef"
    assert mapped[("TRL", "num_generations")] == mapped[("verl", "actor_rollout_ref.rollout.n")] \
        == "train.generations_per_prompt"
    assert mapped[("TRL", "max_completion_length")] == mapped[("verl", "data.max_response_length")] \
        == "generation.max_new_tokens"
    assert mapped[("TRL", "per_device_train_batch_size")] == "train.prompts_per_step"
    assert mapped[("verl", "actor_rollout_ref.actor.optim.lr")] == "train.lr"
    assert len({(a.tool, a.theirs) for a in ALIASES}) == len(ALIASES), "a name is listed twice"


def test_a_trl_name_in_the_overrides_suggests_the_mapped_key():
    msg = refusal(overrides=["train.learning_rate=1e-5"])
    assert "unknown config key 'train.learning_rate'" in msg
    assert "did you mean train.lr (TRL's learning_rate)?" in msg
    assert "learning_check_steps'?" not in msg  # the look-alike key is not the suggestion
    assert "recipe.loss.kl_coef (TRL's beta)" in refusal(overrides={"recipe.loss.beta": 0.01})


def test_a_trl_or_verl_name_in_a_yaml_file_suggests_the_mapped_key(tmp_path):
    trl = tmp_path / "trl.yaml"
    trl.write_text("train:\n  learning_rate: 1.0e-5\n")
    assert "did you mean train.lr (TRL's learning_rate)?" in refusal(trl)
    verl = tmp_path / "verl.yaml"  # verl's nesting, pasted as is
    verl.write_text("actor_rollout_ref:\n  rollout:\n    n: 8\n")
    msg = refusal(verl)
    assert "unknown config key 'actor_rollout_ref'" in msg
    assert "did you mean train.generations_per_prompt (verl's actor_rollout_ref.rollout.n)?" in msg


def test_a_name_without_a_workbench_key_says_so_and_a_plain_typo_keeps_its_look_alike():
    msg = refusal(overrides=["data.max_prompt_length=512"])
    assert "verl's data.max_prompt_length has no workbench key: prompts are never truncated" in msg
    assert "did you mean 'train.max_steps'?" in refusal(overrides=["train.max_step=5"])


def test_short_names_match_only_with_their_context():
    assert alias_for("generation.n") is None  # verl's rollout.n needs its section: a bare n is no match
    assert alias_for("rollout.n").ours == "train.generations_per_prompt"
    assert alias_for("actor_rollout_ref.rollout.val_kwargs.n").ours == "eval.samples_per_prompt"
    assert alias_for("learning_rate").ours == "train.lr"


def test_the_cli_prints_the_suggestion_in_one_line(capsys):
    assert main(["config", "show", "--set", "train.learning_rate=1e-5"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "did you mean train.lr (TRL's learning_rate)?" in err
