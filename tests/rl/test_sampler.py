"""CurriculumSampler: epoch shuffles, No-Positive-Resampling, exhaustion, exact state round trip."""

from __future__ import annotations

import json

import pytest

from workbench.errors import UserError
from workbench.rl.sampler import AllPromptsRetiredError, CurriculumSampler


def test_each_epoch_is_a_fresh_permutation_and_draws_cross_epochs():
    s = CurriculumSampler(7, seed=1)
    first = s.next_prompts(7)
    second = s.next_prompts(7)
    assert sorted(first) == list(range(7)) and sorted(second) == list(range(7))
    assert first != second  # reshuffled (fixed seed: deterministic)
    s2 = CurriculumSampler(7, seed=1)
    assert s2.next_prompts(4) + s2.next_prompts(5) + s2.next_prompts(5) == first + second
    assert s2.stats()["epoch"] == 1.0


def test_same_seed_same_order_other_seed_other_order():
    a = CurriculumSampler(50, seed=3).next_prompts(50)
    assert CurriculumSampler(50, seed=3).next_prompts(50) == a
    assert CurriculumSampler(50, seed=4).next_prompts(50) != a


def test_prompt_at_threshold_is_retired_for_good():
    s = CurriculumSampler(5, seed=0, retire_threshold=0.9)
    ids = s.next_prompts(5)
    assert s.update(ids[0], [True] * 9 + [False]) is True  # 0.9 >= 0.9
    assert s.update(ids[1], [True] * 8 + [False] * 2) is False  # 0.8
    later = s.next_prompts(40)
    assert ids[0] not in later and ids[1] in later
    assert s.is_retired(ids[0])
    st = s.stats()
    assert st["retired"] == 1.0 and st["active"] == 4.0 and st["epoch"] == 10.0


def test_retired_prompt_not_yet_drawn_this_epoch_is_skipped():
    s = CurriculumSampler(6, seed=2)
    order = CurriculumSampler(6, seed=2).next_prompts(6)
    s.next_prompts(2)
    s.update(order[4], [1.0, 1.0])  # a late result for a prompt still ahead in this epoch
    assert s.next_prompts(3) == [order[2], order[3], order[5]]


def test_disabled_never_retires_but_records():
    s = CurriculumSampler(3, seed=0, enabled=False)
    assert s.update(0, [True, True]) is False
    assert sorted(s.next_prompts(3)) == [0, 1, 2]
    assert s.stats()["pass_rate_seen"] == 1.0


def test_latest_versus_running_pass_rate():
    latest = CurriculumSampler(3, seed=0)
    running = CurriculumSampler(3, seed=0, pass_rate="running")
    for s in (latest, running):
        s.update(0, [0.0, 0.0, 0.0, 0.0])
        s.update(0, [1.0, 1.0, 1.0, 1.0])
    assert latest.is_retired(0)  # the latest group solved it
    assert not running.is_retired(0)  # running mean is 0.5


def test_all_retired_raises_a_clear_error():
    s = CurriculumSampler(2, seed=0)
    s.update(0, [True, True])
    s.update(1, [True, True])
    with pytest.raises(AllPromptsRetiredError, match="all 2 prompts are retired"):
        s.next_prompts(1)


def test_state_round_trip_gives_the_same_future():
    a = CurriculumSampler(13, seed=5)
    for step in range(6):
        for pid in a.next_prompts(4):
            a.update(pid, [step % 3 == 0] * 3 + [True])
    state = json.loads(json.dumps(a.state_dict()))  # plain JSON
    b = CurriculumSampler(13, seed=999)
    b.load_state_dict(state)
    assert b.stats() == a.stats()
    assert b.next_prompts(40) == a.next_prompts(40)
    assert b.state_dict() == a.state_dict()


def test_load_refuses_another_dataset_and_bad_input():
    s = CurriculumSampler(4, seed=0)
    with pytest.raises(UserError, match="4 prompts.*5"):
        CurriculumSampler(5, seed=0).load_state_dict(s.state_dict())
    with pytest.raises(UserError, match=r"\[0, 1\]"):
        s.update(0, [-1.0, 1.0])
    with pytest.raises(UserError, match="prompt_id"):
        s.update(4, [True])
    with pytest.raises(UserError, match="empty"):
        s.update(0, [])
    with pytest.raises(UserError, match="num_prompts"):
        CurriculumSampler(0, seed=0)


def test_pool_warning_counts_only_prompts_ever_solved():
    """Capped answers: half the pool can never be solved. Those prompts stay active forever, so
    counting active prompts never warns; counting ever-solved ones warns while some remain."""
    import random

    per_step, n = 16, 400
    unsolvable = set(range(0, n, 2))
    s = CurriculumSampler(n, seed=0)
    rng = random.Random(0)
    skill, warned_with = 0.05, None
    for step in range(400):
        for pid in s.next_prompts(per_step):
            p = 0.0 if pid in unsolvable else skill
            s.update(pid, [rng.random() < p for _ in range(8)])
        skill = min(0.98, skill + 0.01)
        if step < 20:
            assert s.pool_warning(per_step) is None, f"warned at step {step}, while the policy was young"
        if warned_with is None and (msg := s.pool_warning(per_step)):
            warned_with = (step, s.solvable_left(), msg)
        if len(s.retired) >= n - len(unsolvable):
            break
    assert len(s.retired) == n - len(unsolvable), "the solvable half should all retire in this simulation"
    assert n - len(s.retired) >= n // 2  # the old rule's active count never dropped under 4 steps' worth
    assert warned_with is not None, "no warning before the solvable prompts ran out"
    step, left, msg = warned_with
    assert 0 < left < 4 * per_step and "never solved" in msg


def _retire(s: CurriculumSampler, pids) -> list[bool]:
    return [s.update(pid, [True] * 8) for pid in pids]


def test_the_cap_returns_the_longest_retired_prompt_to_the_pool():
    s = CurriculumSampler(10, seed=0, max_retired_share=0.3)  # at most 3 of 10 retired
    assert _retire(s, [4, 7, 1]) == [True] * 3 and s.retired == {4, 7, 1}
    assert s.update(2, [True] * 8) is True  # retires, and 4 (retired first) comes back
    assert s.retired == {7, 1, 2} and not s.is_retired(4)
    _retire(s, [4, 9])  # 4 retires again when it passes again: 7, then 1 go back
    assert s.retired == {2, 4, 9}
    st = s.stats()
    assert st["retired"] == 3.0 and st["retired_fraction"] == 0.3 and st["returned"] == 3.0
    assert sorted(s.next_prompts(7)) == [0, 1, 3, 5, 6, 7, 8]  # the returned ones are drawn again
    assert s.retirement() == {"enabled": True, "retired": 3, "prompts": 10, "retired_share": 0.3,
                              "max_retired_share": 0.3, "returned": 3}  # fmt: skip


def test_without_a_cap_the_rule_retires_without_bound():
    s = CurriculumSampler(10, seed=0)
    _retire(s, range(9))
    assert len(s.retired) == 9 and s.returned == 0 and s.retirement()["max_retired_share"] is None
    with pytest.raises(UserError, match="max_retired_share"):
        CurriculumSampler(10, seed=0, max_retired_share=0.0)


def test_state_round_trip_carries_the_retirement_order_and_returned_count():
    a = CurriculumSampler(20, seed=1, max_retired_share=0.2)  # 4 of 20
    _retire(a, [13, 2, 17, 5, 8])  # 13 went back
    state = json.loads(json.dumps(a.state_dict()))
    assert state["retired"] == [2, 17, 5, 8] and state["returned"] == 1
    b = CurriculumSampler(20, seed=1, max_retired_share=0.2)
    b.load_state_dict(state)
    assert b.stats() == a.stats()
    _retire(a, [0])
    _retire(b, [0])
    assert a.retired == b.retired == {17, 5, 8, 0}, "the resumed run returns the same (oldest) prompt"
    assert b.next_prompts(30) == a.next_prompts(30) and b.state_dict() == a.state_dict()
    lower = CurriculumSampler(20, seed=1, max_retired_share=0.1)  # resumed with a lower cap: 2 of 20
    lower.load_state_dict(a.state_dict())
    _retire(lower, [11])
    assert lower.retired == {0, 11} and lower.returned == a.returned + 3


def test_a_run_resumed_with_the_rule_off_returns_the_prompts_retired_before():
    """A run resumed past recipe.npr_max_epochs (a larger train.max_steps) builds its sampler
    disabled: the prompts the rule retired before the checkpoint must be drawn again."""
    on = CurriculumSampler(6, seed=0, max_retired_share=0.5)
    _retire(on, [3, 1])
    off = CurriculumSampler(6, seed=0, enabled=False)
    off.load_state_dict(json.loads(json.dumps(on.state_dict())))
    assert off.retired == set() and off.returned == 2 and off.retirement()["retired"] == 0
    assert sorted(off.next_prompts(6)) == list(range(6)), "every prompt is in the pool again"
    assert off.stats()["prompts_seen"] == on.stats()["prompts_seen"], "the history is kept"


def test_a_checkpoint_from_before_the_cap_still_loads():
    old = CurriculumSampler(6, seed=0)
    _retire(old, [3, 1])
    state = old.state_dict()
    state["retired"], _ = sorted(state["retired"]), state.pop("returned")  # the old format
    s = CurriculumSampler(6, seed=0, max_retired_share=0.34)  # 2 of 6
    s.load_state_dict(state)
    assert s.retired == {1, 3} and s.returned == 0
    _retire(s, [5])
    assert s.retired == {3, 5} and s.returned == 1


def test_share_warning_says_what_the_rule_removed_past_the_threshold_only():
    from workbench.rl.sampler import RETIRED_SHARE_WARNING

    s = CurriculumSampler(100, seed=0)
    _retire(s, range(int(RETIRED_SHARE_WARNING * 100)))
    assert s.share_warning() is None, "at the threshold, not past it"
    _retire(s, [99])
    msg = s.share_warning()
    assert msg.startswith("No-Positive-Resampling has retired 26 of 100 training prompts (26%): the run now trains only "
                          "on the prompts it still fails sometimes, while validation measures all of them")
    assert "recipe.npr_max_retired_share=0.1 (the default; now none)" in msg and "recipe.no_positive_resampling=false" in msg
    off = CurriculumSampler(4, seed=0, enabled=False)
    _retire(off, range(4))
    assert off.share_warning() is None
    capped = CurriculumSampler(100, seed=0, max_retired_share=RETIRED_SHARE_WARNING)
    _retire(capped, range(60))
    assert capped.share_warning() is None and capped.retired_share() == RETIRED_SHARE_WARNING


def test_the_rule_is_off_for_a_set_drawn_more_epochs_than_the_recipe_allows():
    from workbench.rl.sampler import NPR_MAX_EPOCHS, npr_off_reason

    quickstart, demo = (4000, 800 * 64), (20000, 1400 * 64)  # 12.8 and 4.5 epochs
    why = npr_off_reason(*quickstart, NPR_MAX_EPOCHS)
    assert why.startswith("No-Positive-Resampling is off for this run: its steps draw 12.8 epochs of the 4000 training prompts")
    assert "recipe.npr_max_epochs = 8" in why and "task.num_train" in why
    assert npr_off_reason(*demo, NPR_MAX_EPOCHS) is None
    assert npr_off_reason(4000, 8 * 4000, 8.0) is None  # exactly at the limit: the rule runs
    assert npr_off_reason(*quickstart, None) is None  # null: the paper's rule, always on
