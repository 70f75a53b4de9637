"""What runs inside vLLM's worker (extension.py), on plain torch modules shaped like vLLM's: the
fp32 head computed from the fp32 head the trainer sends, the weight-push entry point, and a push
that pickles to one buffer (TP > 1 pickles RPC arguments) rather than one buffer per tensor."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

from workbench.engine.rollout.vllm import extension as ext
from workbench.engine.weights import FlatWeights, as_state_dict

UnquantizedEmbeddingMethod = type("UnquantizedEmbeddingMethod", (), {})  # vLLM's class name for a plain head
Fp8LinearMethod = type("Fp8LinearMethod", (), {})


class FakeLogitsProcessor(nn.Module):
    """vLLM 0.32's LogitsProcessor: `_apply_head` projects (model dtype), `_get_logits` drops padding."""

    org_vocab_size = 5

    def _apply_head(self, lm_head, hidden, bias=None):
        return F.linear(hidden, lm_head.weight)

    def _get_logits(self, hidden, lm_head, bias=None):
        return self._apply_head(lm_head, hidden, bias)[..., : self.org_vocab_size]


class ParallelLMHead(nn.Module):
    """vLLM's ParallelLMHead (found by its class name): a weight padded past the vocabulary (8 rows, 5 real), no forward."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(8, 16, dtype=torch.bfloat16), requires_grad=False)
        self.quant_method = UnquantizedEmbeddingMethod()


class Model(nn.Module):
    """A running bf16 model: `load_weights` casts into its parameters, as vLLM's loaders do."""

    def __init__(self, head_cls: type = ParallelLMHead):
        super().__init__()
        self.lm_head, self.logits_processor = head_cls(), FakeLogitsProcessor()
        self.loaded: list[str] = []

    def load_weights(self, weights):
        for name, t in weights:
            self.loaded.append(name)
            if name == ext.HEAD_KEY:
                self.lm_head.weight.data[: t.shape[0]].copy_(t)


def _worker(model: Model):
    worker = SimpleNamespace(model_runner=SimpleNamespace(model=model))
    worker._wb_heads = lambda: ext.WorkbenchWorkerExtension._wb_heads(worker)
    return worker


def test_fp32_head_patch_projects_in_float32_from_its_copy_and_leaves_other_heads_alone():
    g = torch.Generator().manual_seed(0)
    model = Model()
    model.lm_head.weight.data.copy_(torch.randn(8, 16, generator=g))
    head, lp = model.lm_head, model.logits_processor
    hidden = torch.randn(3, 16, generator=g).bfloat16()
    assert lp._get_logits(hidden, head).dtype == torch.bfloat16
    assert ext.patch_model(model, FakeLogitsProcessor) == "patched"
    out = lp._get_logits(hidden, head, None)
    assert out.dtype == torch.float32 and out.shape == (3, 5)
    torch.testing.assert_close(out, F.linear(hidden.float(), head.weight.float())[:, :5])
    quantized = SimpleNamespace(weight=head.weight, quant_method=Fp8LinearMethod())
    assert lp._get_logits(hidden, quantized, None).dtype == torch.bfloat16  # left to vLLM
    other = ParallelLMHead()  # a head module the patch was not built for: vLLM's own projection
    assert lp._get_logits(hidden, other, None).dtype == torch.bfloat16


def test_a_model_whose_head_cannot_be_found_reports_none_and_warns(caplog):
    model = Model()
    model.lm_head.__class__ = type("OutputHead", (nn.Module,), {})  # a head class that is no ParallelLMHead
    with caplog.at_level("WARNING"):
        assert ext.patch_model(model, FakeLogitsProcessor) == "none"
    assert "fp32_head: none" in caplog.text
    assert not hasattr(model.logits_processor, "_wb_head")  # vLLM's own (model-dtype) head, not "patched"
    hidden = torch.randn(2, 16).bfloat16()
    assert model.logits_processor._get_logits(hidden, model.lm_head).dtype == torch.bfloat16


def test_a_push_with_an_fp32_head_makes_the_generator_project_with_those_fp32_weights_in_place():
    model = Model()
    worker = _worker(model)
    assert ext.patch_model(model, FakeLogitsProcessor) == "patched"
    copy = model.logits_processor._wb_head
    g = torch.Generator().manual_seed(1)
    head32 = torch.randn(5, 16, generator=g) * 1e-2 + 1.0  # bf16 would round these: exactness is visible
    pushed = FlatWeights.from_state_dict({"model.norm.weight": torch.ones(16).bfloat16(), ext.HEAD_KEY: head32})
    assert ext.WorkbenchWorkerExtension.workbench_load_weights(worker, pushed) == 2
    assert model.loaded == ["model.norm.weight", ext.HEAD_KEY]  # the model got every tensor
    hidden = torch.randn(4, 16, generator=g).bfloat16()
    logits = model.logits_processor._get_logits(hidden, model.lm_head)
    torch.testing.assert_close(logits, F.linear(hidden.float(), head32), rtol=0, atol=1e-6)
    bf16 = F.linear(hidden.float(), model.lm_head.weight.float())[:, :5]  # what vLLM's own head computes
    assert (logits - bf16).abs().max() > 1e-4
    # A push without the head (e.g. a tied embedding only): the live weight again, in the same buffer.
    ext.WorkbenchWorkerExtension.workbench_load_weights(worker, {"model.norm.weight": torch.ones(16)})
    torch.testing.assert_close(model.logits_processor._get_logits(hidden, model.lm_head), bf16)
    assert model.logits_processor._wb_head is copy  # refreshed in place: a push never holds two fp32 heads


def test_a_push_pickles_to_about_one_buffer_not_one_per_tensor():
    torch.manual_seed(0)
    state = {f"layers.{i}.weight": torch.randn(64, 64) for i in range(40)}
    flat = FlatWeights.from_state_dict(state, dtype=torch.bfloat16)
    views = as_state_dict(flat)  # what the rollout worker hands the backend: views into one buffer
    assert len(pickle.dumps(views, protocol=5)) > 20 * flat.nbytes  # each view carries the whole buffer
    payload = ext.to_flat(views)
    assert payload.buffer.ctypes.data == flat.buffer.ctypes.data  # rebuilt without a copy
    assert len(pickle.dumps(payload, protocol=5)) < 1.05 * flat.nbytes + 16_384
    oob: list = []
    assert len(pickle.dumps(payload, protocol=5, buffer_callback=oob.append)) < 16_384  # vLLM ships it out of band
    rebuilt = pickle.loads(pickle.dumps(payload, protocol=5)).tensors()
    assert list(rebuilt) == list(state) and all(torch.equal(rebuilt[k], views[k]) for k in state)
    fresh = {"a": torch.ones(3), "b": torch.zeros(2, dtype=torch.bfloat16)}  # not views: packed once
    packed = ext.to_flat(fresh).tensors()
    assert torch.equal(packed["a"], fresh["a"]) and packed["b"].dtype == torch.bfloat16


class OldLogitsProcessor(nn.Module):
    """vLLM 0.24's LogitsProcessor (what a lent GPU machine can carry): no `_apply_head`;
    `_get_logits` projects in the model's dtype, gathers over TP ranks and drops the padding."""

    org_vocab_size = 5

    def _gather_logits(self, logits):
        return logits

    def _get_logits(self, hidden, lm_head, bias=None):
        return self._gather_logits(F.linear(hidden, lm_head.weight))[..., : self.org_vocab_size]


def test_on_an_older_vllm_the_patch_replaces_get_logits_and_still_projects_in_float32():
    g = torch.Generator().manual_seed(2)
    model = Model()
    model.logits_processor = OldLogitsProcessor()
    model.lm_head.weight.data.copy_(torch.randn(8, 16, generator=g))
    hidden = torch.randn(3, 16, generator=g).bfloat16()
    assert ext.patch_model(model, OldLogitsProcessor) == "patched"
    out = model.logits_processor._get_logits(hidden, model.lm_head, None)
    assert out.dtype == torch.float32 and out.shape == (3, 5)
    torch.testing.assert_close(out, F.linear(hidden.float(), model.lm_head.weight.float())[:, :5])
    assert model.logits_processor._get_logits(hidden, ParallelLMHead(), None).dtype == torch.bfloat16  # not ours
