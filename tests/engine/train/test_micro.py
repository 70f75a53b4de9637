"""Micro-batches by tokens: budgets kept, every row once, as many turns on every rank."""

from __future__ import annotations

import random

from workbench.engine.train.micro import micro_batches, pack, rank_rows


def test_parts_stay_within_the_token_and_row_budgets():
    rng = random.Random(0)
    lengths = [rng.randint(5, 300) for _ in range(57)]
    parts = pack(lengths, range(len(lengths)), max_rows=8, max_tokens=600)
    assert sorted(i for p in parts for i in p) == list(range(57))  # every row exactly once
    for p in parts:
        width = max(lengths[i] for i in p)
        assert len(p) <= 8
        assert len(p) * width <= 600 or len(p) == 1
        assert lengths[p[0]] == width  # longest first: the first row sets the width


def test_a_row_longer_than_the_budget_runs_alone():
    parts = pack([10, 5000, 12, 11], range(4), max_rows=64, max_tokens=100)
    assert parts[0] == [1] and sorted(i for p in parts[1:] for i in p) == [0, 2, 3]


def test_short_rows_share_a_micro_batch_and_long_ones_split():
    # the old fixed 64 rows would put 64 x 2,048 tokens in one forward
    lengths = [2048] * 8 + [40] * 64
    parts = pack(lengths, range(len(lengths)), max_rows=64, max_tokens=4096)
    assert [len(p) for p in parts] == [2] * 4 + [64]


def test_every_rank_runs_the_same_number_of_turns():
    lengths = [100] * 6 + [10] * 6  # rank 0 holds the long rows, rank 1 the short ones
    plans = [micro_batches(lengths, r, 2, max_rows=64, max_tokens=200) for r in range(2)]
    assert len(plans[0]) == len(plans[1]) == 3
    assert [len(p) for p in plans[1]] == [6, 0, 0]  # rows 6..11 fit one turn; then empty turns
    assert sorted(i for plan in plans for p in plan for i in p) == list(range(12))
    assert list(rank_rows(12, 1, 2)) == list(range(6, 12))


def test_more_ranks_than_rows_gives_empty_turns_not_errors():
    plans = [micro_batches([7, 9], r, 3, max_rows=4, max_tokens=100) for r in range(3)]
    assert plans == [[[0]], [[1]], [[]]]
