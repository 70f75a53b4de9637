"""Rollout transport and batch building: what the trainer sees is exactly what was generated."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from workbench.engine.batch import Chunk, Group, GroupBuffer, PackedGroups, build_batch
from workbench.engine.model.sampling import Completion


def make_chunk() -> Chunk:
    c1 = Completion([5, 6, 7], [8, 9, 1], [-0.5, -1.25, -0.1], [3, 3, 4], [True, True, True], finished=True)
    c2 = Completion([5, 6, 7], [8, 2], [-0.7, -2.0], [3, 3], [True, False], finished=False, interrupted=True)
    c3 = Completion([4, 4], [], [], [], [], finished=False)
    return Chunk(
        chunk_id=7,
        groups=[Group(0, 7, [c1, c2], [True, False], [1.0, -1.0]), Group(3, 7, [c3], [False], [-1.0])],
        generator_rank=1,
        gen_seconds=0.5,
        tokens_generated=5,
        prompt_tokens=8,
        weight_swaps=2,
    )


def test_chunk_survives_the_packed_pickle_round_trip():
    chunk = make_chunk()
    back = pickle.loads(pickle.dumps(chunk, protocol=5))
    assert back.chunk_id == 7 and back.generator_rank == 1 and back.weight_swaps == 2
    assert [(g.prompt_id, g.correct, g.rewards) for g in back.groups] == [
        (g.prompt_id, g.correct, g.rewards) for g in chunk.groups
    ]
    for g, h in zip(chunk.groups, back.groups):
        assert g.completions == h.completions


def test_build_batch_aligns_log_probs_versions_and_loss_mask():
    chunk = make_chunk()
    b = build_batch(chunk.groups, pad_id=0)
    assert b.input_ids.tolist() == [[5, 6, 7, 8, 9, 1], [5, 6, 7, 8, 2, 0], [4, 4, 0, 0, 0, 0]]
    assert b.attention_mask.sum(1).tolist() == [6, 5, 2]
    # position t predicts token t+1: completions start predicting at prompt length - 1
    assert b.loss_mask.tolist()[0] == [0, 0, 1, 1, 1]
    assert b.loss_mask.tolist()[1] == [0, 0, 1, 0, 0]  # the forced token is left out of the loss
    assert b.loss_mask[2].sum() == 0
    torch.testing.assert_close(b.gen_logp[0, 2:], torch.tensor([-0.5, -1.25, -0.1]))
    assert b.versions.tolist()[0] == [-1, -1, 3, 3, 4]
    assert b.prompt_index.tolist() == [0, 0, 1] and b.rewards.tolist() == [1.0, -1.0, -1.0]
    assert b.truncated.tolist() == [False, True, True] and b.lengths.tolist() == [3, 2, 0]


def _triples(groups):
    return [(g.prompt_id, g.correct, g.rewards, g.completions) for g in groups]


def test_packed_groups_select_and_concat_keep_groups_whole_and_in_order():
    groups = make_chunk().groups
    pg = PackedGroups.from_groups(groups)
    assert len(pg) == 2 and pg.num_sequences == 3
    assert _triples(pg.select(np.array([False, True])).to_groups()) == _triples(groups[1:])
    assert _triples(pg.select(slice(0, 1)).to_groups()) == _triples(groups[:1])
    both = PackedGroups.concat([pg.select(slice(1, 2)), pg.select(slice(0, 1))])
    assert _triples(both.to_groups()) == _triples([groups[1], groups[0]])
    assert build_batch(pg, pad_id=0).input_ids.tolist() == build_batch(groups, pad_id=0).input_ids.tolist()


def test_oldest_version_per_group_decides_staleness():
    pg = make_chunk().packed
    # group 0 has tokens of versions 3 and 4; group 1 has no tokens at all
    assert pg.min_version_per_group(default=9).tolist() == [3, 9]


def test_group_buffer_hands_out_the_oldest_groups_splitting_chunks():
    chunk = make_chunk()
    buf = GroupBuffer()
    buf.add(chunk.packed)
    buf.add(PackedGroups.from_groups(chunk.groups[:1]))
    assert len(buf) == 3 and buf.prompt_ids() == [0, 3, 0]
    first = buf.take(1)
    assert first.prompt_id.tolist() == [0] and len(buf) == 2 and buf.prompt_ids() == [3, 0]
    rest = buf.take(5)  # asks for more than buffered: gets what there is
    assert rest.prompt_id.tolist() == [3, 0] and len(buf) == 0
    assert [c for _, c in rest.group_results()] == [[False], [True, False]]


def test_trainer_input_pickles_as_arrays_not_objects():
    pg = make_chunk().packed
    back = pickle.loads(pickle.dumps(pg, protocol=5))
    assert _triples(back.to_groups()) == _triples(make_chunk().groups)


def test_build_batch_refuses_a_completion_without_prompt():
    c = Completion([], [4], [-0.1], [0], [True])
    with pytest.raises(ValueError, match="without a prompt"):
        build_batch([Group(0, 0, [c], [False], [-1.0])], pad_id=0)
