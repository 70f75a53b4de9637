"""generation.max_ahead_steps auto: no lag when the trainer is the bottleneck, more when generation
is (capped by recipe.off_policy.k), each change with its reason; a fixed depth never moves."""

from __future__ import annotations

import pytest

from workbench.config import run_config_from_dict
from workbench.configtools import ConfigError
from workbench.engine.run.lag import PipelineDepth


def _run(depth: PipelineDepth, gen_s_per_group: float, train_s: float, steps: int = 6, groups: int = 8) -> list:
    changes = []
    for step in range(1, steps + 1):
        depth.generated(gen_s_per_group * groups, groups)
        if (c := depth.trained(train_s, step)) is not None:
            changes.append(c)
    return changes


def _auto(k: int = 4, generators: int = 1) -> PipelineDepth:
    return PipelineDepth(k, None, prompts_per_step=8, num_generators=generators)


def test_a_slow_trainer_gets_no_lag_and_the_reason_says_so():
    depth = _auto()
    assert depth.depth == 1  # the pipeline's usual overlap until two steps are measured
    changes = _run(depth, gen_s_per_group=1.0, train_s=18.0)  # G = 8 s a step, T = 18 s
    assert depth.depth == 0 and [c.new for c in changes] == [0]
    assert "the trainer is the bottleneck (18.00 s a step against the generators' 8.00 s): no lag" in changes[0].reason
    assert changes[0].step == 2


def test_slow_generation_gets_more_steps_ahead_capped_by_k():
    depth = _auto(k=4)
    _run(depth, gen_s_per_group=3.0, train_s=10.0)  # G = 24 s, T = 10 s: ceil(2.4) = 3
    assert depth.depth == 3
    capped = _auto(k=2)
    _run(capped, gen_s_per_group=3.0, train_s=10.0)
    assert capped.depth == 2
    assert "generation is the bottleneck (24.00 s a step against the trainer's 10.00 s): 2 step(s) ahead" in capped.changes[0].reason


def test_generators_in_parallel_divide_the_generation_time():
    depth = _auto(k=4, generators=4)
    _run(depth, gen_s_per_group=3.0, train_s=10.0)  # 24 s of generator time over 4 generators: 6 s < 10 s
    assert depth.depth == 0


def test_the_depth_follows_a_change_of_bottleneck_but_not_noise():
    depth = _auto(k=4)
    _run(depth, gen_s_per_group=1.0, train_s=10.0)  # G 8 < T 10: on-policy
    assert depth.depth == 0
    _run(depth, gen_s_per_group=1.1, train_s=8.0)  # G 8.8 vs T 8: within the margin, stays
    assert depth.depth == 0
    _run(depth, gen_s_per_group=2.0, train_s=8.0, steps=8)  # G 16 vs T 8: generation now the bottleneck
    assert depth.depth == 2 and [c.new for c in depth.changes] == [0, 2]


def test_skipped_steps_cost_the_trainer_nothing_so_generation_is_the_bottleneck():
    depth = _auto(k=3)
    _run(depth, gen_s_per_group=0.5, train_s=0.0)  # every group filtered: the trainer computes nothing
    assert depth.depth == 3 and depth.measured == (4.0, 0.0)
    assert "generation is the bottleneck (4.00 s a step against the trainer's 0.00 s): 3 step(s) ahead" in depth.changes[0].reason


def test_a_fixed_depth_never_moves_and_is_capped_by_k():
    depth = PipelineDepth(2, 5, prompts_per_step=8, num_generators=1)
    assert depth.depth == 2
    assert _run(depth, gen_s_per_group=0.1, train_s=30.0) == [] and depth.depth == 2


def test_the_config_takes_auto_or_a_count():
    cfg = run_config_from_dict({"generation": {"max_ahead_steps": "auto"}})
    assert PipelineDepth.from_config(cfg).auto
    assert cfg.kept_versions() == cfg.recipe.off_policy.k or cfg.kept_versions() == 0
    assert not PipelineDepth.from_config(run_config_from_dict({"generation": {"max_ahead_steps": 1}})).auto
    with pytest.raises(ConfigError, match="max_ahead_steps"):
        run_config_from_dict({"generation": {"max_ahead_steps": "deep"}})
