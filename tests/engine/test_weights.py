"""FlatWeights: the trainer's weights as one byte buffer, read back exactly on the other side."""

from __future__ import annotations

import pytest
import torch

from workbench.engine.weights import FlatWeights, as_state_dict


def _mixed_state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "w": torch.randn(3, 5, generator=g),
        "b16": torch.randn(7, generator=g).to(torch.bfloat16),  # odd byte count: alignment matters
        "half": torch.randn(2, 3, generator=g).to(torch.float16),
        "steps": torch.tensor(11, dtype=torch.int64),  # 0-dim
        "empty": torch.zeros(0, 4),
        "flag": torch.tensor([True, False, True]),
    }


def test_round_trip_keeps_names_dtypes_shapes_and_values():
    state = _mixed_state()
    back = FlatWeights.from_state_dict(state).tensors()
    assert list(back) == list(state)
    for name, t in state.items():
        assert back[name].dtype == t.dtype and back[name].shape == t.shape, name
        assert torch.equal(back[name], t), name


def test_weights_are_a_snapshot_not_a_view_of_the_live_model():
    model = torch.nn.Linear(4, 2)
    flat = FlatWeights.from_module(model)
    before = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.add_(1.0)  # the trainer's next optimizer step
    assert torch.equal(flat.tensors()["weight"], before)


def test_through_ray_object_store_loads_into_a_model(ray_cluster):
    import ray

    src, dst = torch.nn.Linear(6, 3), torch.nn.Linear(6, 3)
    flat = ray.get(ray.put(FlatWeights.from_module(src)))  # read-only buffer on this side
    dst.load_state_dict(as_state_dict(flat))
    for a, b in zip(src.parameters(), dst.parameters()):
        assert torch.equal(a, b)


def test_plain_state_dicts_are_accepted_and_other_types_named():
    sd = {"x": torch.ones(2)}
    assert as_state_dict(sd) is sd
    with pytest.raises(TypeError, match="not list"):
        as_state_dict([torch.ones(2)])


def test_tied_tensors_are_stored_once_and_kept_tensors_keep_their_dtype():
    emb = torch.nn.Embedding(11, 6)
    head = torch.nn.Linear(6, 11, bias=False)
    head.weight = emb.weight  # tied, as GPT-2 and small Qwen2 models are
    model = torch.nn.ModuleDict({"emb": emb, "head": head, "norm": torch.nn.LayerNorm(6)})
    flat = FlatWeights.from_module(model, dtype=torch.bfloat16, keep=[head.weight])
    back = flat.tensors()
    assert list(back) == list(model.state_dict())  # both names of the tied weight are there
    assert back["emb.weight"].data_ptr() == back["head.weight"].data_ptr()  # one copy of its bytes
    assert back["head.weight"].dtype == torch.float32 and back["norm.weight"].dtype == torch.bfloat16
    assert flat.nbytes == 272 + 16 + 16  # the fp32 head once (264 bytes, aligned to 16), two bf16 norm vectors
    assert torch.equal(back["head.weight"], head.weight.detach())


def test_a_gather_runs_on_every_tensor_and_a_rank_that_only_takes_part_gets_no_buffer():
    state = _mixed_state()
    seen: list[tuple] = []
    gathered = FlatWeights.from_state_dict(state, gather=lambda t: seen.append(t.shape) or t, write=False)
    assert seen == [t.shape for t in state.values()]  # every rank calls every collective, in order
    assert gathered.nbytes == 0
