"""MixtureSampler: domains drawn by weight, No-Positive-Resampling per prompt within its domain."""

from __future__ import annotations

import collections
from types import SimpleNamespace

import pytest

from workbench.errors import UserError
from workbench.rl.mixture import MixtureSampler, make_sampler
from workbench.rl.sampler import AllPromptsRetiredError, CurriculumSampler

MEMBERS = {"math": list(range(0, 300)), "code": list(range(300, 400))}


def test_domains_are_drawn_by_weight_and_each_epoch_covers_its_domain():
    s = MixtureSampler(MEMBERS, {"math": 1.0, "code": 3.0}, seed=0)
    ids = s.next_prompts(4000)
    share = collections.Counter("code" if i >= 300 else "math" for i in ids)
    assert abs(share["code"] / 4000 - 0.75) < 0.03
    code = [i for i in ids if i >= 300][:100]  # the first code epoch: every code prompt once
    assert sorted(code) == MEMBERS["code"]


def test_npr_retires_a_prompt_within_its_domain_and_exhausted_domains_drop_out():
    s = MixtureSampler(MEMBERS, {"math": 1.0, "code": 1.0}, seed=1)
    for pid in MEMBERS["code"]:
        assert s.update(pid, [True] * 8)  # every code prompt solved: retired
    assert s.is_retired(300) and not s.is_retired(0)
    assert all(i < 300 for i in s.next_prompts(200))  # only math is left to draw
    assert s.stats()["retired/code"] == 100.0 and s.stats()["retired"] == 100.0
    for pid in MEMBERS["math"]:
        s.update(pid, [True] * 8)
    with pytest.raises(AllPromptsRetiredError):
        s.next_prompts(1)


def test_state_round_trip_gives_the_same_future_draws():
    a = MixtureSampler(MEMBERS, {"math": 1.0, "code": 1.0}, seed=3)
    a.next_prompts(77)
    for pid in (0, 5, 301):
        a.update(pid, [True] * 4)
    b = MixtureSampler(MEMBERS, {"math": 1.0, "code": 1.0}, seed=3)
    b.load_state_dict(a.state_dict())
    assert a.next_prompts(50) == b.next_prompts(50)
    with pytest.raises(UserError, match="not a task-mixture state"):
        b.load_state_dict(CurriculumSampler(10, seed=0).state_dict())


def _task(domains_train, weights):
    train = [SimpleNamespace(domain=d) for d in domains_train]
    return SimpleNamespace(train=train, parts={d: None for d in weights}, weights=weights)


def test_make_sampler_is_the_plain_curriculum_for_one_task_and_skips_validation_only_sources():
    single = SimpleNamespace(train=[SimpleNamespace(domain="")] * 5, parts={}, weights={})
    assert type(make_sampler(single, seed=0, retire_threshold=0.9, enabled=True)) is CurriculumSampler
    task = _task(["math", "math", "code"], {"math": 0.4, "code": 0.4, "humaneval": 0.2})
    s = make_sampler(task, seed=0, retire_threshold=0.9, enabled=True)
    assert isinstance(s, MixtureSampler) and s.domains == ["math", "code"]
    assert set(s.next_prompts(30)) == {0, 1, 2}


def test_the_cap_holds_per_domain_and_the_retirement_is_told_per_domain():
    s = MixtureSampler(MEMBERS, {"math": 1.0, "code": 1.0}, seed=0, max_retired_share=0.25)
    for pid in MEMBERS["code"]:
        s.update(pid, [True] * 8)
    st = s.stats()
    assert st["retired/code"] == 25.0 and st["retired_fraction/code"] == 0.25 and st["retired_fraction/math"] == 0.0
    assert st["returned"] == 75.0 and any(300 <= i < 400 for i in s.next_prompts(100))  # code is still drawn
    ret = s.retirement()
    assert (ret["retired"], ret["prompts"], ret["retired_share"]) == (25, 400, 25 / 400)
    assert ret["domains"]["code"]["retired_share"] == 0.25 and ret["domains"]["math"]["retired"] == 0
    assert s.share_warning() is None
    b = MixtureSampler(MEMBERS, {"math": 1.0, "code": 1.0}, seed=0, max_retired_share=0.25)
    b.load_state_dict(s.state_dict())
    assert b.retirement() == ret
    uncapped = MixtureSampler(MEMBERS, {"math": 1.0, "code": 1.0}, seed=0)
    for pid in MEMBERS["code"][:30]:
        uncapped.update(pid, [True] * 8)
    assert uncapped.share_warning().startswith("domain 'code': No-Positive-Resampling has retired 30 of 100")
