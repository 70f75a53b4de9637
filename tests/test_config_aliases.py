"""TRL's and verl's names: every mapped key is a real RunConfig key, and a TRL or verl name in a
YAML file, a --set or a Session's overrides is refused with its workbench key."""

from __future__ import annotations

import pytest

from workbench.cli import main
from workbench.commands.config import config_keys
from workbench.config import load_run_config
from workbench.config_aliases import ALIASES, METRIC_ALIASES, alias_for
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
    assert "unknown config key 'actor_rollout_ref.rollout.n'" in msg
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


def test_the_names_trl_and_verl_users_bring_each_point_to_ours():
    """Issue 53's list: each name, where a user writes it, is refused with our key (or why there is none)."""
    cases = {
        "reward_funcs": "did you mean reward.functions (TRL's reward_funcs), e.g. reward.functions: [{fn: ",
        "reward_weights": "did you mean reward.functions (TRL's reward_weights), e.g. reward.functions: [{fn: my_rewards:accuracy, weight: 2.0}]?",
        "use_peft": "did you mean model.lora (TRL's use_peft), e.g. model.lora.rank=8?",
        "peft_config": "did you mean model.lora (TRL's peft_config)",
        "model.lora_r": "did you mean model.lora.rank (TRL's lora_r)?",
        "model.lora.r": "did you mean model.lora.rank (PEFT's r)?",
        "report_to": "did you mean tracking.wandb.project (TRL's report_to), e.g. tracking.wandb.project=NAME?",
        "generation.top_p": "TRL's top_p has no workbench key: the workbench samples from the full softmax",
        "logging_steps": "TRL's logging_steps has no workbench key: every step's metrics are logged",
        "log_completions": "did you mean tracking.wandb.log_completions (TRL's log_completions)",
        "model.model_name_or_path": "did you mean model.path (TRL's model_name_or_path)?",
        "actor_rollout_ref.model.lora_rank": "did you mean model.lora.rank (verl's actor_rollout_ref.model.lora_rank)?",
        "custom_reward_function.path": "did you mean reward.functions (verl's custom_reward_function.path)",
    }
    for key, hint in cases.items():
        value = {"rank": 8} if key == "peft_config" else 8
        msg = refusal(overrides={"model.lora.rank": 8, key: value} if key == "model.lora.r" else {key: value})
        assert f"unknown config key '{key}' ({hint}" in msg, (key, msg)


def test_peft_names_match_only_under_model_lora():
    assert alias_for("model.lora.r").ours == "model.lora.rank"
    assert alias_for("r") is None and alias_for("train.r") is None and alias_for("lora.r") is None


def test_a_verl_yaml_reports_every_foreign_key_at_once(tmp_path):
    """A verl config pasted as is: one error naming each key, with its workbench key where there is one."""
    verl = tmp_path / "verl.yaml"
    verl.write_text(
        "data:\n  train_batch_size: 64\n  max_response_length: 512\n  train_files: data/train.parquet\n"
        "actor_rollout_ref:\n  model:\n    path: Qwen/Qwen2.5-0.5B-Instruct\n    lora_rank: 16\n"
        "  actor:\n    optim:\n      lr: 1.0e-6\n  rollout:\n    n: 8\n    top_p: 0.9\n"
        "custom_reward_function:\n  path: my_reward.py\n  name: compute_score\n"
        "trainer:\n  total_epochs: 3\n  some_verl_only_knob: 1\n"
        "train:\n  lrr: 0.1\n"  # and a plain typo in one of ours
    )
    msg = refusal(verl)
    assert "\n" not in msg and msg.startswith(f"{verl}: 13 problems in the config: (1) ")
    for leaf, ours in [("data.train_batch_size", "train.prompts_per_step"),
                       ("data.max_response_length", "generation.max_new_tokens"), ("data.train_files", "task.path"),
                       ("actor_rollout_ref.model.path", "model.path"),
                       ("actor_rollout_ref.model.lora_rank", "model.lora.rank"),
                       ("actor_rollout_ref.actor.optim.lr", "train.lr"),
                       ("actor_rollout_ref.rollout.n", "train.generations_per_prompt"),
                       ("custom_reward_function.path", "reward.functions"),
                       ("custom_reward_function.name", "reward.functions")]:
        assert f"unknown config key '{leaf}' (did you mean {ours} (verl's {leaf})" in msg, leaf
    assert "unknown config key 'actor_rollout_ref.rollout.top_p' (verl's actor_rollout_ref.rollout.top_p has no workbench key" in msg
    assert "unknown config key 'trainer.total_epochs' (verl's trainer.total_epochs has no workbench key" in msg
    assert "unknown config key 'trainer' (no workbench key for its some_verl_only_knob)" in msg
    assert "unknown config key 'train.lrr' (did you mean 'train.lr'?)" in msg


def test_several_wrong_keys_in_the_file_and_the_overrides_are_all_named(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("train:\n  learning_rate: 1.0e-5\n  num_generations: 4\nseed: 1\n")
    msg = refusal(path, ["report_to=wandb"])
    assert msg.startswith(f"{path}: 2 problems in the config: (1) unknown config key 'train.learning_rate'")
    assert "(2) unknown config key 'train.num_generations' (did you mean train.generations_per_prompt" in msg
    assert "(and in the overrides: unknown config key 'report_to' (did you mean tracking.wandb.project" in msg


def test_the_cli_names_every_wrong_key_in_one_line(capsys):
    assert main(["config", "show", "--set", "train.learning_rate=1e-5", "--set", "generation.top_p=0.9"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "2 problems in the config" in err
    assert "did you mean train.lr (TRL's learning_rate)?" in err and "TRL's top_p has no workbench key" in err


def test_every_metric_mapped_is_one_the_glossary_defines():
    from tests.docs.test_metrics_glossary import covered, glossary_keys

    entries = glossary_keys()
    for m in METRIC_ALIASES:
        if m.ours is None:
            assert m.note, f"{m.tool}'s {m.theirs}: not logged and no note saying what to look at"
            continue
        example = m.ours.replace("<name>", "accuracy").replace("<domain>", "math")
        assert covered(example, entries), f"{m.tool}'s {m.theirs} -> {m.ours}: not in docs/metrics.md"
    mapped = {(m.tool, m.theirs): m.ours for m in METRIC_ALIASES}
    assert mapped[("TRL", "frac_reward_zero_std")] == "train/zero_variance_frac"
    assert mapped[("TRL", "rewards/<name>/mean")] == "rewards/<name>/mean"
    assert mapped[("verl", "response_length/clip_ratio")] == mapped[("TRL", "completions/clipped_ratio")] == "train/truncation_rate"
    assert len({(m.tool, m.theirs) for m in METRIC_ALIASES}) == len(METRIC_ALIASES), "a metric is listed twice"
