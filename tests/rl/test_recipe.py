"""Recipe presets: every file loads, leave-one-out variants change one field, typos are refused."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from workbench.configtools import ConfigError, flatten, to_dict
from workbench.rl import recipe as recipe_mod
from workbench.rl.recipe import RECIPE_DIR, available_recipes, load_recipe, recipe_from_value

# leave-one-out preset -> (the one field it changes, its value there)
LOO = {
    "scalerl-loo-loss-dapo": ("loss.type", "ppo_clip"),
    "scalerl-loo-loss-gspo": ("loss.type", "gspo"),
    "scalerl-loo-agg-sample": ("aggregation", "sample"),
    "scalerl-loo-agg-token": ("aggregation", "token"),
    "scalerl-loo-norm-prompt": ("advantage_norm", "prompt"),
    "scalerl-loo-norm-none": ("advantage_norm", "none"),
    "scalerl-loo-no-zvf": ("zero_variance_filter", False),
    "scalerl-loo-no-npr": ("no_positive_resampling", False),
    "scalerl-loo-no-fp32": ("fp32_head", False),
    "scalerl-loo-ppo-off-policy": ("off_policy.algorithm", "ppo-off-policy"),
    "scalerl-loo-length-penalty": ("length_control.type", "penalty"),
}
PRESETS = {"scalerl", "deepseek-grpo", "qwen-dapo", "magistral", "minimax-m1", "gspo", "scalerl-sync", *LOO}


def fields(name: str) -> dict:
    d = flatten(to_dict(load_recipe(name)))
    d.pop("name")
    return d


def test_the_preset_set_is_complete_and_every_preset_loads():
    assert set(available_recipes()) == PRESETS
    for name in PRESETS:
        assert load_recipe(name).name == name


def test_every_preset_file_cites_the_paper_in_a_comment():
    for name in PRESETS:
        first = (RECIPE_DIR / f"{name}.yaml").read_text().splitlines()[0]
        assert first.startswith("# ") and ("paper" in first or "arXiv" in first or "GSPO" in first), name


@pytest.mark.parametrize("name", sorted(LOO))
def test_leave_one_out_differs_from_scalerl_in_exactly_its_field(name):
    base, loo = fields("scalerl"), fields(name)
    diff = {k for k in base if base[k] != loo[k]}
    key, value = LOO[name]
    assert diff == {key}
    assert loo[key] == value


def test_scalerl_matches_the_paper():
    r = load_recipe("scalerl")
    assert (r.loss.type, r.loss.eps_max, r.loss.tis_cap) == ("cispo", 4.0, None)
    assert (r.aggregation, r.advantage_norm) == ("prompt", "batch")
    assert r.zero_variance_filter and r.no_positive_resampling and r.resample_threshold == 0.9
    assert r.fp32_head and r.length_control.type == "interrupt"
    assert (r.off_policy.algorithm, r.off_policy.k) == ("pipeline", 8)


def test_baseline_presets():
    d = load_recipe("deepseek-grpo")
    assert (d.loss.type, d.loss.clip_low, d.loss.clip_high) == ("ppo_clip", 0.2, 0.2)
    assert (d.aggregation, d.advantage_norm, d.zero_variance_filter, d.no_positive_resampling, d.fp32_head) == (
        "sample", "prompt", False, False, False)
    assert (d.off_policy.algorithm, d.off_policy.k) == ("ppo-off-policy", 8)
    q = load_recipe("qwen-dapo")
    assert (q.loss.type, q.loss.clip_low, q.loss.clip_high, q.aggregation) == ("ppo_clip", 0.2, 0.28, "token")
    assert q.zero_variance_filter and q.length_control.type == "penalty" and q.off_policy.algorithm == "ppo-off-policy"
    m = load_recipe("magistral")
    assert fields("magistral") == {**fields("qwen-dapo"), "off_policy.algorithm": "pipeline"}
    assert m.off_policy.k == 8
    mm = load_recipe("minimax-m1")
    assert (mm.loss.type, mm.fp32_head, mm.off_policy.algorithm) == ("cispo", True, "ppo-off-policy")
    g = load_recipe("gspo")
    assert (g.loss.type, g.loss.gspo_clip_low, g.loss.gspo_clip_high) == ("gspo", 3e-3, 5e-3)


def test_unknown_recipe_lists_the_available_ones():
    with pytest.raises(ConfigError) as e:
        load_recipe("scalerll")
    assert "unknown recipe 'scalerll'" in str(e.value) and "scalerl, scalerl-loo" in str(e.value)


@pytest.fixture
def recipe_dir(tmp_path, monkeypatch):
    shutil.copy(RECIPE_DIR / "scalerl.yaml", tmp_path / "scalerl.yaml")
    monkeypatch.setattr(recipe_mod, "RECIPE_DIR", tmp_path)
    return tmp_path


def test_typo_in_a_preset_is_refused_through_base(recipe_dir):
    (recipe_dir / "mine.yaml").write_text("base: scalerl\nloss:\n  eps_mx: 5\n")
    with pytest.raises(ConfigError, match=r"loss\.eps_mx.*did you mean 'eps_max'"):
        recipe_mod.load_recipe("mine")
    (recipe_dir / "broken-base.yaml").write_text("base: scalerl\naggregaton: token\n")
    (recipe_dir / "child.yaml").write_text("base: broken-base\nfp32_head: false\n")
    with pytest.raises(ConfigError, match="aggregaton"):
        recipe_mod.load_recipe("child")
    (recipe_dir / "orphan.yaml").write_text("base: nope\n")
    with pytest.raises(ConfigError, match="unknown recipe 'nope' \\(base of 'orphan'\\)"):
        recipe_mod.load_recipe("orphan")


def test_inheritance_cycle_is_refused(recipe_dir):
    (recipe_dir / "a.yaml").write_text("base: b\n")
    (recipe_dir / "b.yaml").write_text("base: a\n")
    with pytest.raises(ConfigError, match="inherits from itself"):
        recipe_mod.load_recipe("a")


def test_inline_recipe_mapping_with_base():
    r = recipe_from_value({"base": "scalerl", "loss": {"eps_max": 8}})
    assert r.loss.eps_max == 8.0 and r.loss.type == "cispo"
    with pytest.raises(ConfigError, match="aggreation"):
        recipe_from_value({"base": "scalerl", "aggreation": "token"})
    with pytest.raises(ConfigError, match="unknown recipe"):
        recipe_from_value({"base": "nope"})


def test_overrides_and_cross_field_validation():
    assert load_recipe("scalerl", {"loss.type": "gspo"}).loss.type == "gspo"
    with pytest.raises(ConfigError, match="eps_max must be > 0"):
        load_recipe("scalerl", {"loss.eps_max": 0})
    with pytest.raises(ConfigError, match="resample_threshold"):
        load_recipe("scalerl", {"resample_threshold": 1.5})
    with pytest.raises(ConfigError, match="budget_min .* exceeds budget_max"):
        load_recipe("scalerl", {"length_control.budget_min": 0.9})
    with pytest.raises(ConfigError, match="not one of"):
        load_recipe("scalerl", {"aggregation": "group"})
    with pytest.raises(ConfigError, match=r"recipe.npr_max_epochs must be > 0 or null, got 0"):
        load_recipe("scalerl", {"npr_max_epochs": 0})
    assert load_recipe("scalerl", {"npr_max_epochs": None}).npr_max_epochs is None


def test_importing_the_recipe_module_does_not_import_torch():
    code = (
        "import sys, workbench.rl.recipe, workbench.rl; "
        "workbench.rl.load_recipe('scalerl'); "
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_public_api_is_exported_lazily():
    import workbench.rl as rl

    for name in rl.__all__:
        assert getattr(rl, name) is not None


def test_the_sync_preset_differs_from_scalerl_in_the_algorithm_alone():
    base, sync = fields("scalerl"), fields("scalerl-sync")
    assert {k for k in base if base[k] != sync[k]} == {"off_policy.algorithm"} and sync["off_policy.algorithm"] == "sync"
