"""The RL core on CUDA: same results as on CPU, and the FP32 head under a bf16 body on the GPU."""

from __future__ import annotations

import pytest
import torch

from workbench.rl.advantages import group_advantages, zero_variance_keep
from workbench.rl.aggregation import aggregation_weights
from workbench.rl.head import token_logprobs
from workbench.rl.losses import policy_loss
from workbench.rl.recipe import LossConfig

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


@pytest.mark.parametrize("loss_type", ["cispo", "ppo_clip", "gspo"])
def test_loss_and_gradient_match_cpu(loss_type):
    g = torch.Generator().manual_seed(0)
    n, t, d, v = 8, 7, 6, 19
    x = torch.randn(n, t, d, generator=g)
    tokens = torch.randint(0, v, (n, t), generator=g)
    mask = (torch.arange(t)[None] < torch.tensor([7, 3, 0, 5, 7, 1, 4, 6])[:, None]).float()
    pidx = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    rewards = torch.tensor([1.0, -1.0, 1.0, 1.0, -1.0, 1.0, 1.0, -1.0])
    noise = torch.randn(n, t, generator=g) * 0.3
    cfg = LossConfig(type=loss_type, gspo_clip_low=0.1, gspo_clip_high=0.1)
    results = []
    for dev in ("cpu", "cuda"):
        torch.manual_seed(0)
        model = torch.nn.Linear(d, v).to(dev)
        keep = zero_variance_keep(rewards.to(dev), pidx.to(dev))
        adv = group_advantages(rewards.to(dev)[keep], pidx.to(dev)[keep], "batch")
        m = mask.to(dev)[keep]
        w = aggregation_weights(m, pidx.to(dev)[keep], "prompt")
        logp = token_logprobs(model(x.to(dev)[keep]), tokens.to(dev)[keep])
        loss, stats = policy_loss(cfg, logp, logp.detach() + noise.to(dev)[keep], adv, m, w)
        loss.backward()
        assert loss.device.type == dev
        results.append((loss.item(), model.weight.grad.cpu(), stats))
    (l_cpu, g_cpu, s_cpu), (l_gpu, g_gpu, s_gpu) = results
    assert l_gpu == pytest.approx(l_cpu, rel=1e-4, abs=1e-6)
    assert torch.allclose(g_gpu, g_cpu, atol=1e-5)
    assert s_gpu["clip_fraction"] == pytest.approx(s_cpu["clip_fraction"])


def test_fp32_head_on_gpu_bf16_body():
    transformers = pytest.importorskip("transformers")
    from workbench.engine.model.forward import causal_lm_forward

    cfg = transformers.LlamaConfig(
        vocab_size=50, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=True,
    )
    model = transformers.LlamaForCausalLM(cfg).to("cuda", torch.bfloat16)
    ids = torch.randint(0, 50, (2, 9), device="cuda")
    logits, _ = causal_lm_forward(model, ids, torch.ones_like(ids), fp32_head=True)
    assert logits.dtype == torch.float32 and logits.device.type == "cuda"
    assert model.get_input_embeddings().weight.dtype == torch.bfloat16
