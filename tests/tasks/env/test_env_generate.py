"""A real model's `generate` as the episode's `sample` (SmolLM2-135M-Instruct from its GGUF file,
greedy, a few tokens a turn): the ids it sampled are the episode's, at the positions it sampled them;
a direct `generate` from each turn's context gives the same ids; and a forward pass over the whole
episode (what the trainer computes) gives the generator's log-probs at the masked positions."""

from __future__ import annotations

import pytest

from tests.tasks.env.env_helpers import smollm2_gguf, smollm2_tokenizer
from workbench.tasks.env import EnvSettings, EpisodeRunner, load_env_factory

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model():
    torch = pytest.importorskip("torch")
    pytest.importorskip("gguf")
    from transformers import AutoModelForCausalLM

    path = smollm2_gguf()
    torch.manual_seed(0)
    m = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    return m.eval()


def greedy(model, tok, ids, max_new):
    import torch

    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             max_new_tokens=max_new, do_sample=False, output_logits=True, return_dict_in_generate=True,
                             eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)  # fmt: skip
    new = out.sequences[0, len(ids):].tolist()
    logprobs = [torch.log_softmax(step[0].float(), -1)[t].item() for step, t in zip(out.logits, new)]
    return new, logprobs


def test_generated_ids_are_kept_exactly_across_turns(model):
    import torch

    tok = smollm2_tokenizer()
    turns = []

    def sample(ids, max_new):
        new, logprobs = greedy(model, tok, ids, max_new)
        turns.append((len(ids), new))
        return new, logprobs

    env = load_env_factory("workbench.envs.guess:GuessNumberEnv")
    ep = EpisodeRunner(env, tok, EnvSettings(max_turns=3, max_new_tokens=24, max_episode_tokens=1024)).run(
        {"prompt": "", "target": 17}, sample
    )
    assert ep.error is None and ep.turns == len(turns) >= 1
    sampled = set()
    for start, new in turns:
        assert ep.token_ids[start:start + len(new)] == new  # as sampled, where sampled
        assert greedy(model, tok, ep.token_ids[:start], len(new))[0] == new  # a direct generate agrees
        sampled |= set(range(start, start + len(new)))
    assert {i for i, m in enumerate(ep.mask) if m} == sampled
    with torch.no_grad():  # the trainer's view: one forward pass over the whole episode
        logits = model(torch.tensor([ep.token_ids])).logits[0].float()
    logp = torch.log_softmax(logits[:-1], -1).gather(-1, torch.tensor(ep.token_ids[1:])[:, None])[:, 0]
    for i in sorted(sampled):
        assert abs(logp[i - 1].item() - ep.logprobs[i]) < 1e-3, i
    # greedy SmolLM2 answers in full sentences, so the game goes on: the environment's reply sits
    # between the turns, unmasked (3 turns measured on 2026-12-07)
    assert len(turns) >= 2
    gap = range(turns[0][0] + len(turns[0][1]), turns[1][0])
    assert len(gap) > 0 and all(ep.mask[i] == 0 and ep.logprobs[i] is None for i in gap)
    assert "guesses left" in tok.decode([ep.token_ids[i] for i in gap])
