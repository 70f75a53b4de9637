"""Every recipe field is honoured by the engine or refused at config time (workbench/rl/honoured.py):
the walk stays complete, the docs show it, and each setting the engine would silently not honour
is refused in one line naming the key, its value and why."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from workbench.config import run_config_from_dict
from workbench.configtools import ConfigError
from workbench.rl.honoured import RECIPE_FIELDS
from workbench.rl.recipe import RecipeConfig

DOC = Path(__file__).resolve().parents[2] / "docs" / "concepts" / "recipe.md"


def dotted_fields(cls: type, prefix: str = "") -> set[str]:
    """Every leaf field of a dataclass tree, dotted (read from the classes, not from an instance)."""
    out: set[str] = set()
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            out |= dotted_fields(type(default), f"{prefix}{f.name}.")
        else:
            out.add(prefix + f.name)
    return out


def test_every_recipe_field_is_in_the_honoured_table():
    """A new recipe field must say where the engine honours it, or what is refused (rl/honoured.py)."""
    fields = dotted_fields(RecipeConfig)
    assert fields - set(RECIPE_FIELDS) == set(), "add these fields to RECIPE_FIELDS in workbench/rl/honoured.py"
    assert set(RECIPE_FIELDS) - fields == set(), "these RECIPE_FIELDS entries name no recipe field"
    assert len(fields) >= 28  # the walk read the nested sections too


def test_the_recipe_page_shows_every_row_of_the_table():
    rows = dict(re.findall(r"^\| `recipe\.([a-z0-9_.]+)` \| (.+) \|$", DOC.read_text(), flags=re.M))
    assert rows == RECIPE_FIELDS


def test_every_file_the_table_names_exists():
    """The table points at the engine's files: a moved or renamed one fails here, not in a reader's hands."""
    package = Path(__file__).resolve().parents[2] / "workbench"
    files = {p.relative_to(package).as_posix() for p in package.rglob("*.py")}
    named = {m for text in RECIPE_FIELDS.values() for m in re.findall(r"[a-z_/]+\.py", text)}
    assert len(named) >= 10
    missing = {n for n in named if not any(f == n or f.endswith("/" + n) for f in files)}
    assert missing == set(), f"RECIPE_FIELDS names files that do not exist: {sorted(missing)}"


def refused(**overrides) -> str:
    with pytest.raises(ConfigError) as e:
        run_config_from_dict({}, overrides)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize(
    "overrides,needles",
    [
        ({"generation.max_ahead_steps": 0}, ["generation.max_ahead_steps=0", "set it >= 1"]),
        ({"resources.trainer_gpus": 2}, ["resources.trainer_gpus=2", "one GPU", "resources.trainer_workers=2"]),
        ({"resources.trainer_gpus": 2, "resources.trainer_workers": 2}, ["resources.trainer_workers=4"]),
        ({"generation.vllm_tensor_parallel_size": 2}, ["vllm_tensor_parallel_size=2 with generation.backend=torch"]),
        ({"resources.generator_gpus": 2}, ["resources.generator_gpus=2 with generation.backend=torch", "generation.num_generators"]),
        ({"resources.evaluator_gpus": 3}, ["resources.evaluator_gpus=3 with generation.backend=torch"]),
        ({"generation.max_batch_sequences": 4}, ["max_batch_sequences=4 is below train.generations_per_prompt=8",
                                                  "the torch generator"]),
        ({"generation.max_batch_sequences": 8, "eval.samples_per_prompt": 16},
         ["is below eval.samples_per_prompt=16", "the torch evaluator"]),
        # vLLM generators queue what exceeds max_batch_sequences; the evaluator without GPUs is a torch one
        ({"generation.backend": "vllm", "generation.max_batch_sequences": 2}, ["is below eval.samples_per_prompt=4"]),
        ({"generation.num_generators": 3, "train.prompts_per_step": 2, "recipe.off_policy.algorithm": "sync"},
         ["generation.num_generators=3 with recipe.off_policy.algorithm=sync", "1 would never generate", "to 2"]),
        ({"generation.num_generators": 5, "train.prompts_per_step": 2},  # pipeline: min(k 8, max_ahead_steps 2) steps
         ["algorithm=pipeline", "=2 steps' prompts (4 at train.prompts_per_step=2)"]),
        ({"generation.num_generators": 7, "train.prompts_per_step": 2, "recipe": "deepseek-grpo", "recipe.off_policy.k": 3},
         ["recipe.off_policy.k=3 steps' prompts (6 at"]),
        ({"generation.num_generators": 4, "train.prompts_per_step": 2, "train.max_steps": 1}, ["train.max_steps=1 steps'"]),
    ],
    ids=["max-ahead-0", "trainer-2-gpus", "trainer-workers", "torch-tp", "torch-generator-gpus", "torch-evaluator-gpus",
         "torch-group", "torch-eval-group", "vllm-torch-evaluator", "sync-idle-generators", "pipeline-idle-generators",
         "ppo-off-policy-idle-generators", "short-run-idle-generators"],
)  # fmt: skip
def test_settings_the_engine_cannot_honour_are_refused_at_load(overrides, needles):
    msg = refused(**overrides)
    for n in needles:
        assert n in msg, msg


def test_the_same_settings_where_the_engine_honours_them_load():
    a = run_config_from_dict({}, {"generation.max_ahead_steps": 1, "resources.trainer_gpus": 1, "resources.generator_gpus": 1,
                                  "generation.max_batch_sequences": 8})  # fmt: skip
    assert (a.generation.max_ahead_steps, a.resources.trainer_gpus, a.generation.max_batch_sequences) == (1, 1, 8)
    b = run_config_from_dict({}, {"generation.num_generators": 4, "train.prompts_per_step": 2})  # two steps in flight
    assert b.generation.num_generators == 4
    c = run_config_from_dict({}, {"generation.num_generators": 6, "train.prompts_per_step": 2, "recipe": "deepseek-grpo",
                                  "recipe.off_policy.k": 3})  # fmt: skip
    assert (c.generation.num_generators, c.recipe.off_policy.k) == (6, 3)
    # vLLM: tensor parallelism over whole GPUs, generators that queue a group larger than the batch
    d = run_config_from_dict({}, {"generation.backend": "vllm", "resources.generator_gpus": 2, "resources.evaluator_gpus": 2,
                                  "generation.vllm_tensor_parallel_size": 2, "generation.max_batch_sequences": 2})  # fmt: skip
    assert (d.generation.vllm_tensor_parallel_size, d.generation.max_batch_sequences) == (2, 2)


def test_the_recipes_own_refusals_still_name_their_field():
    assert "recipe.off_policy.k must be >= 1" in refused(**{"recipe.off_policy.k": 0})
    assert "recipe.loss.tis_cap must be > 0" in refused(**{"recipe.loss.tis_cap": 0})
    assert "generations_per_prompt must be >= 2" in refused(**{"train.generations_per_prompt": 1})  # the zero-variance filter's group
    assert "is not one of" in refused(**{"recipe.aggregation": "batch"})


@pytest.mark.parametrize(
    "key,value,needle",
    [
        ("loss.eps_max", 0, "recipe.loss.eps_max must be > 0, got 0"),
        ("loss.clip_low", 1, "recipe.loss.clip_low must be in [0, 1), got 1"),
        ("loss.gspo_clip_low", -0.1, "recipe.loss.gspo_clip_low must be in [0, 1), got -0.1"),
        ("loss.clip_high", -1, "recipe.loss.clip_high must be >= 0, got -1"),
        ("loss.gspo_clip_high", -1, "recipe.loss.gspo_clip_high must be >= 0"),
        ("loss.kl_coef", -0.1, "recipe.loss.kl_coef must be >= 0, got -0.1"),
        ("loss.entropy_coef", -0.1, "recipe.loss.entropy_coef must be >= 0"),
        ("loss.tis_cap", -2, "recipe.loss.tis_cap must be > 0 or null, got -2"),
        ("resample_threshold", 0, "recipe.resample_threshold must be in (0, 1], got 0"),
        ("npr_max_retired_share", 1.5, "recipe.npr_max_retired_share must be in (0, 1] or null, got 1.5"),
        ("npr_max_epochs", -1, "recipe.npr_max_epochs must be > 0 or null, got -1"),
        ("off_policy.k", 0, "recipe.off_policy.k must be >= 1, got 0"),
        ("length_control.budget_min", 0, "recipe.length_control.budget_min must be > 0, got 0"),
        ("length_control.budget_max", 0, "recipe.length_control.budget_max must be > 0"),
        ("length_control.answer_budget", 0, "recipe.length_control.answer_budget must be > 0"),
        ("length_control.l_max", 0, "recipe.length_control.l_max must be > 0"),
        ("length_control.l_cache", 0.9, "recipe.length_control.l_cache (0.9) exceeds l_max (0.875)"),
        ("length_control.phrase", "Time is up.", "recipe.length_control.phrase must contain the end-of-thinking marker"),
        ("loss.type", "reinforce", "recipe.loss.type: 'reinforce' is not one of"),
        ("advantage_norm", "group", "recipe.advantage_norm: 'group' is not one of"),
        ("off_policy.algorithm", "async", "recipe.off_policy.algorithm: 'async' is not one of"),
        ("length_control.type", "truncate", "recipe.length_control.type: 'truncate' is not one of"),
    ],
)
def test_each_recipe_value_the_engine_cannot_take_is_refused_at_load(key, value, needle):
    assert needle in refused(**{f"recipe.{key}": value})
