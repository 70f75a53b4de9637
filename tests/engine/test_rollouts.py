"""Rollout transport and batch building: what the trainer sees is exactly what was generated."""

from __future__ import annotations

import pickle

import torch

from workbench.engine.rollouts import Chunk, Group, build_batch
from workbench.engine.sampling import Completion


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


def test_step_groups_travel_packed_too():
    from workbench.engine.rollouts import StepGroups

    groups = make_chunk().groups
    back = pickle.loads(pickle.dumps(StepGroups(groups)))
    assert [g.completions for g in back.groups] == [g.completions for g in groups]
