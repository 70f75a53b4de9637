"""The RL core on CUDA: same results as on CPU, the FP32 head under a bf16 body on the GPU, and
the trainer's shared-prompt forward with the fast kernels in bf16 (issue 23) matching whole rows."""

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


def whole_and_shared(device: str) -> list[tuple[torch.Tensor, dict[str, torch.Tensor]]]:
    """Issue 23's step on `device` (the fused GELU and the attention per dtype of kernels.py, bf16
    autocast over fp32 weights): [(hidden states, body gradients)] with rows whole, then with a
    group's prompt run once. Its body also runs on the CPU: `whole_and_shared("cpu")`."""
    transformers = pytest.importorskip("transformers")
    from workbench.engine.model.forward import PromptShare, body_hidden, shared_prompt_hidden
    from workbench.engine.model.kernels import fast_kernels

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=37, n_positions=32, n_embd=64, n_layer=2, n_head=2, activation_function="gelu_new",
                                  bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)  # fmt: skip
    model = fast_kernels(transformers.GPT2LMHeadModel(cfg).to(device), torch.bfloat16, device).train()
    prompts, comps = [[5, 9, 2, 30], [7, 3, 12, 8, 21, 6]], [[11, 4, 1], [13], [2, 1], [9, 8, 7, 6]]
    rows = [(prompts[0], comps[0]), (prompts[0], comps[1]), (prompts[1], comps[2]), (prompts[1], comps[3])]
    width = max(len(p) + len(c) for p, c in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    attn, pos = torch.zeros_like(ids), torch.zeros(len(rows), width - 1, dtype=torch.bool)
    for r, (p, c) in enumerate(rows):
        ids[r, : len(p) + len(c)], attn[r, : len(p) + len(c)] = torch.tensor(p + c), 1
        pos[r, len(p) - 1 : len(p) + len(c) - 1] = True
    ids, attn, pos = ids.to(device), attn.to(device), pos.to(device)
    share = PromptShare([len(p) for p, _ in rows], [len(p) + len(c) for p, c in rows], [0, 0, 1, 1])
    outs = []
    for run in (lambda: body_hidden(model, ids, attn)[:, :-1][pos], lambda: shared_prompt_hidden(model, ids, attn, pos, share)):
        model.zero_grad()
        with torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16):
            h = run()
        h.float().square().mean().backward()
        outs.append((h.float(), {n: p.grad.float().clone() for n, p in model.named_parameters() if p.grad is not None}))
    return outs


def test_shared_prompt_forward_in_bf16_on_the_gpu():
    (h_whole, g_whole), (h_shared, g_shared) = whole_and_shared("cuda")
    assert h_shared.device.type == "cuda"
    torch.testing.assert_close(h_shared, h_whole, atol=5e-2, rtol=5e-2)  # bf16 tolerance
    assert g_shared.keys() == g_whole.keys() and g_whole
    for n in g_whole:
        assert torch.allclose(g_shared[n], g_whole[n], atol=5e-2, rtol=1e-1), n
