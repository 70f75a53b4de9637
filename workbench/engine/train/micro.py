"""Micro-batches by tokens: which rows each trainer rank runs in each forward/backward.

The memory of one forward/backward grows with rows x padded length (the body's activations;
the head is chunked, see `workbench.rl.head`), so a micro-batch takes rows until it would pass
`max_tokens` padded tokens (its rows x its longest row) or `max_rows` rows. A row longer than
the budget runs alone: a sequence is never split.

Every rank holds the whole batch and cuts it identically: rank r takes the r-th contiguous share
of the rows, sorts it longest first (rows of similar length share a micro-batch: less padding),
and packs it. All ranks run the same number of micro-batches (FSDP's collectives need every
rank in every forward), so a rank with fewer gets empty ones: it takes part and adds nothing.

    parts = micro_batches(lengths, rank=0, world_size=2, max_rows=64, max_tokens=16384)
    for rows in parts: ...   # row indices into the batch, longest first; [] = an empty turn

Each micro-batch's statistics come back as partial sums: `add_partial` folds one into the step's
(max/min statistics take the max/min, the rest add up) and `merge_ranks` folds the workers'.
"""

from __future__ import annotations

import math
from typing import Any, Sequence


def rank_rows(n: int, rank: int, world_size: int) -> range:
    """The rows of rank `rank`: a contiguous share of ceil(n / world_size) rows (the last may be short)."""
    per_rank = math.ceil(n / world_size)
    return range(min(n, rank * per_rank), min(n, (rank + 1) * per_rank))


def pack(lengths: Sequence[int], rows: Sequence[int], max_rows: int, max_tokens: int) -> list[list[int]]:
    """`rows` sorted longest first, cut greedily so that each part has at most `max_rows`
    rows and rows x longest <= `max_tokens` (a single longer row gets its own part)."""
    order = sorted(rows, key=lambda i: (-lengths[i], i))
    parts: list[list[int]] = []
    for i in order:
        # longest first: the part's width is its first row's length
        if parts and len(parts[-1]) < max_rows and (len(parts[-1]) + 1) * lengths[parts[-1][0]] <= max_tokens:
            parts[-1].append(i)
        else:
            parts.append([i])
    return parts


def micro_batches(lengths: Sequence[int], rank: int, world_size: int, max_rows: int, max_tokens: int) -> list[list[int]]:
    """This rank's micro-batches (row indices); as many on every rank, padded with []."""
    n = len(lengths)
    cuts = [pack(lengths, rank_rows(n, r, world_size), max(1, max_rows), max(1, max_tokens)) for r in range(world_size)]
    count = max(1, max(len(p) for p in cuts))
    mine = cuts[rank]
    return mine + [[] for _ in range(count - len(mine))]


def is_extreme(key: str) -> bool:
    """A max/min statistic (folded by max/min, not added up)."""
    return key.endswith("_max") or key.endswith("_min")


def add_partial(sums: dict[str, float], part: dict[str, float]) -> None:
    """Fold one partial result into `sums` (micro-batches, ranks): extremes take max/min, the rest add."""
    for key, val in part.items():
        if key.endswith("_max"):
            sums[key] = max(sums.get(key, -math.inf), val)
        elif key.endswith("_min"):
            sums[key] = min(sums.get(key, math.inf), val)
        else:
            sums[key] = sums.get(key, 0.0) + val


def merge_ranks(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Add up the ranks' partial sums (loss, entropy, token counts); extremes take max/min."""
    sums: dict[str, float] = {}
    for p in parts:
        add_partial(sums, p["sums"])
    total = {k: sum(p[k] for p in parts) for k in ("loss", "ent", "tok")}
    return {**total, "sums": sums}
