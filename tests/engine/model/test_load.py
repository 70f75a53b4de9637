"""The char tokenizer, the cached builtin warm-started model, local HF directories, sampling."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from workbench.config import ModelConfig, TaskConfig
from workbench.engine.model import builtin as models
from workbench.engine.model.builtin import INFO_FILE, build_char_tokenizer, builtin_cache_dir
from workbench.engine.model.load import load_policy
from workbench.engine.model.sampling import left_pad, sample_completions, sampled_pass_rate
from workbench.errors import UserError
from workbench.engine.model.forward import causal_lm_forward
from workbench.tasks.base import load_task


@pytest.fixture(scope="module")
def task():
    return load_task(TaskConfig(name="addition", difficulty=2, num_train=400, num_val=40, seed=0))


@pytest.fixture(scope="module")
def built(tmp_path_factory, task):
    """A briefly warm-started builtin model (few steps keep the test fast)."""
    cfg = ModelConfig(sft_steps=40, sft_batch_size=32, cache_dir=str(tmp_path_factory.mktemp("cache")))
    model, tok = load_policy(cfg, task, progress=False)
    return cfg, model, tok


def test_char_tokenizer_round_trip(tmp_path):
    from transformers import AutoTokenizer

    tok = build_char_tokenizer("0123456789+= \n")
    ids = tok("07+45= \n9", add_special_tokens=False)["input_ids"]
    assert len(ids) == 9 and tok.decode(ids) == "07+45= \n9"
    assert tok.eos_token_id is not None and tok.pad_token_id is not None and tok.eos_token_id != tok.pad_token_id
    assert tok.convert_ids_to_tokens(tok("é", add_special_tokens=False)["input_ids"]) == ["<unk>"]
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    assert again("07+45=", add_special_tokens=False)["input_ids"] == ids[:6]
    assert (again.eos_token_id, again.pad_token_id, again.padding_side) == (tok.eos_token_id, tok.pad_token_id, "left")
    assert again.decode(ids + [tok.eos_token_id], skip_special_tokens=True) == "07+45= \n9"


def test_builtin_model_is_built_once_then_loaded_from_cache(built, task, monkeypatch):
    cfg, model, tok = built
    info = model.workbench_info
    assert info["from_cache"] is False and info["params"] > 10_000
    cache = builtin_cache_dir(cfg, task)
    assert (cache / "config.json").is_file() and (cache / INFO_FILE).is_file()
    assert model.config.eos_token_id == tok.eos_token_id and model.config.pad_token_id == tok.pad_token_id

    def no_training(*args, **kwargs):
        raise AssertionError("a cached model must not be trained again")

    monkeypatch.setattr(models, "sft_warm_start", no_training)
    again, tok2 = load_policy(cfg, task, progress=False)
    assert again.workbench_info["from_cache"] is True
    for (name, p), q in zip(model.state_dict().items(), again.state_dict().values()):
        assert torch.equal(p, q), name
    assert tok2.get_vocab() == tok.get_vocab()
    # Anything the weights depend on (here: the task's difficulty) gives another cache entry.
    other = load_task(TaskConfig(name="addition", difficulty=3, num_train=400, num_val=40, seed=0))
    assert builtin_cache_dir(cfg, other) != cache
    assert builtin_cache_dir(replace(cfg, sft_steps=41), task) != cache
    assert builtin_cache_dir(replace(cfg, dtype="bfloat16"), task) == cache


def test_partial_cache_directory_is_rebuilt(tmp_path, task):
    cfg = ModelConfig(sft_steps=2, sft_batch_size=8, cache_dir=str(tmp_path))
    cache = builtin_cache_dir(cfg, task)
    cache.mkdir(parents=True)
    (cache / "config.json").write_text("{ truncated")  # a crash mid-write leaves no INFO_FILE
    model, _ = load_policy(cfg, task, progress=False)
    assert model.workbench_info["from_cache"] is False
    assert json.loads((cache / "config.json").read_text())["model_type"] == "gpt2"


def test_warm_start_reduces_answer_loss(built, task):
    _, model, tok = built
    fresh = models.build_tiny_model(ModelConfig(), tok, 64, seed=0)

    def answer_loss(m):
        seqs = [tok(ex.prompt + ex.answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for ex in task.val]
        ids, mask = left_pad(seqs, tok.pad_token_id)
        with torch.no_grad():
            logits, _ = causal_lm_forward(m, ids, mask)
        logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        return -logp[:, 5:].mean().item()  # positions after "dd+dd=": answer digits and EOS / pads

    assert answer_loss(model) < answer_loss(fresh) - 0.5


def test_kv_cache_sampling_matches_full_recompute(built, task):
    _, model, tok = built
    prompts = [ex.prompt for ex in task.val[:8]] + ["1+2="]  # one shorter prompt: left padding
    got = sample_completions(model, tok, prompts, max_new_tokens=5, temperature=0)
    want = []
    for p in prompts:  # naive greedy decoding, whole sequence each step, no cache, no padding
        ids = tok(p, add_special_tokens=False)["input_ids"]
        out = []
        for _ in range(5):
            x = torch.tensor([ids + out])
            with torch.no_grad():
                logits, _ = causal_lm_forward(model, x, torch.ones_like(x))
            nxt = int(logits[0, -1].argmax())
            if nxt == tok.eos_token_id:
                break
            out.append(nxt)
        want.append(tok.decode(out, skip_special_tokens=True))
    assert got == want


def test_sampled_pass_rate_is_seeded_and_in_range(built, task):
    _, model, tok = built
    a = sampled_pass_rate(model, tok, task.val, k=4, max_new_tokens=5, seed=3)
    b = sampled_pass_rate(model, tok, task.val, k=4, max_new_tokens=5, seed=3)
    assert a == b and 0.0 <= a <= 1.0
    # A checker that accepts everything gives 1; the pass rate is the checker's mean.
    assert sampled_pass_rate(model, tok, task.val[:5], k=2, max_new_tokens=2, seed=0, checker=lambda c, a: True) == 1.0


def test_local_directory_loads_and_gets_a_pad_token(tmp_path):
    from tokenizers import Regex, Tokenizer, decoders, models as tkm, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    vocab = {"<eos>": 0, **{c: i + 1 for i, c in enumerate("abc")}}
    raw = Tokenizer(tkm.WordLevel(vocab=vocab, unk_token="<eos>"))
    raw.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    raw.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<eos>")  # no pad token
    GPT2LMHeadModel(GPT2Config(vocab_size=4, n_positions=16, n_embd=8, n_layer=1, n_head=2)).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    model, loaded = load_policy(ModelConfig(path=str(tmp_path)))
    assert loaded.pad_token_id == loaded.eos_token_id == 0 and loaded.padding_side == "left"
    assert model.config.pad_token_id == 0 and model.config.eos_token_id == 0
    assert next(model.parameters()).dtype == torch.float32
    assert len(sample_completions(model, loaded, ["ab", "c"], max_new_tokens=3, seed=0)) == 2


def test_missing_directory_config_or_weights_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="no such directory: .*nowhere"):
        load_policy(ModelConfig(path=str(tmp_path / "nowhere")))
    with pytest.raises(UserError, match="has no config.json"):
        load_policy(ModelConfig(path=str(tmp_path)))
    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')
    with pytest.raises(UserError, match=f"{tmp_path} has no weights"):
        load_policy(ModelConfig(path=str(tmp_path)))


def test_builtin_needs_a_task_and_a_known_size(tmp_path, task):
    with pytest.raises(UserError, match="needs a task"):
        load_policy(ModelConfig(cache_dir=str(tmp_path)), None)
    with pytest.raises(UserError, match="unknown builtin model 'builtin:huge'"):
        load_policy(ModelConfig(path="builtin:huge", cache_dir=str(tmp_path)), task)
    with pytest.raises(UserError, match="model.sft_steps"):
        load_policy(ModelConfig(sft_steps=0, cache_dir=str(tmp_path)), task)
    with pytest.raises(UserError, match="model.dtype"):
        load_policy(ModelConfig(path=str(tmp_path), dtype="int8"))


@pytest.mark.slow
def test_default_warm_start_is_calibrated_for_rl(tmp_path):
    """Defaults on addition/2: sampled pass rate low but not zero; greedy well above it (RL headroom)."""
    task = load_task(TaskConfig())
    model, tok = load_policy(replace(ModelConfig(), cache_dir=str(tmp_path)), task, progress=False)
    sampled = sampled_pass_rate(model, tok, task.val, k=8, max_new_tokens=6, seed=0)
    greedy = sampled_pass_rate(model, tok, task.val, k=1, max_new_tokens=6, seed=0, temperature=0)
    assert 0.05 <= sampled <= 0.35, sampled
    assert greedy >= sampled + 0.1, (greedy, sampled)


def test_concurrent_builds_train_once(tmp_path, task):
    import threading

    cfg = ModelConfig(sft_steps=3, sft_batch_size=8, cache_dir=str(tmp_path))
    infos: list = []
    errors: list = []

    def build():
        try:
            model, _ = load_policy(cfg, task, progress=False)
            infos.append(model.workbench_info["from_cache"])
        except Exception as e:  # noqa: BLE001 - a thread's exception would otherwise vanish
            errors.append(repr(e))

    threads = [threading.Thread(target=build) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors
    assert sorted(infos) == [False, True]  # one built it, the other waited and loaded it
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] == [builtin_cache_dir(cfg, task).name]


def test_actors_get_the_builtin_model_inside_the_shared_run_folder_not_the_drivers_cache(built, task, tmp_path):
    """Only the run folder is shared between nodes: a remote trainer given the driver's cache path fails."""
    from pathlib import Path

    from workbench.config import RunConfig
    from workbench.engine.run.actors import actor_config

    model_cfg, model, _ = built
    cfg = RunConfig(out_dir=str(tmp_path / "run"), model=model_cfg)
    path = Path(actor_config(cfg, task).model.path)
    assert path.parent == (tmp_path / "run" / "model").resolve()
    assert (path / "config.json").is_file() and (path / INFO_FILE).is_file()
    assert Path(model_cfg.cache_dir).resolve() not in path.parents
    again = actor_config(cfg, task).model.path  # resumed or restarted: the same copy, not another
    assert again == str(path) and len(list((tmp_path / "run" / "model").iterdir())) == 1
    loaded, _ = load_policy(replace(model_cfg, path=str(path)), progress=False)  # the folder alone loads
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))
