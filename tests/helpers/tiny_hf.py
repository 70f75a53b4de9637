"""Tiny random Hugging Face causal LMs with their own BPE tokenizers, built offline for tests.

    d = build_tiny_hf(tmp_path / "qwen", "qwen2", corpus=task_texts(task))
    cfg = run_config_from_dict({}, {"model.path": str(d), ...})

`build_tiny_hf` trains a byte-level BPE tokenizer on `corpus` with the `tokenizers` library (no
downloads), wraps it in `PreTrainedTokenizerFast` and saves it beside a randomly initialised
`Qwen2ForCausalLM` or `LlamaForCausalLM` (hidden 64, 2 layers). The two flavours differ the way
real checkpoints do:

- "qwen2": EOS `<|im_end|>`, pad `<|endoftext|>` (EOS differs from pad), a ChatML template.
- "llama": BOS `<s>`, EOS `</s>`, no pad token (the workbench pads with EOS), a Llama-style template.

Variants for bad-input tests: `tokenizer=False` (no tokenizer files), `eos=False` (a tokenizer
without an EOS token), `chat_template=False` (no template).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
LLAMA_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}[{{ m['role'] | upper }}] {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}[ASSISTANT] {% endif %}"
)
SPECIALS = {
    "qwen2": {"eos": "<|im_end|>", "pad": "<|endoftext|>", "bos": None, "extra": ["<|im_start|>"]},
    "llama": {"eos": "</s>", "pad": None, "bos": "<s>", "extra": ["<unk>"]},
}
# Text the BPE merges are learned from besides the task: the default interruption phrase, so
# that it encodes to several multi-character tokens as with a real tokenizer.
EXTRA_TEXT = ["Okay, time is up. Let me stop thinking and formulate a final answer now. </think>", "user assistant system"]


def task_texts(task) -> list[str]:
    """Every prompt + answer of a workbench task (the BPE training corpus)."""
    return [ex.prompt + ex.answer for ex in list(task.train) + list(task.val)]


def train_bpe(corpus: Iterable[str], arch: str, *, vocab_size: int = 300, eos: bool = True):
    """A byte-level BPE `PreTrainedTokenizerFast` trained on `corpus` (special tokens per `arch`)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    sp = SPECIALS[arch]
    specials = [t for t in (sp["pad"], sp["eos"], sp["bos"], *sp["extra"]) if t]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator([*corpus, *EXTRA_TEXT], trainer=trainer)
    kw = {"tokenizer_object": tok}
    if eos:
        kw["eos_token"] = sp["eos"]
    if sp["pad"]:
        kw["pad_token"] = sp["pad"]
    if sp["bos"]:
        kw["bos_token"] = sp["bos"]
    return PreTrainedTokenizerFast(**kw)


def build_tiny_hf(
    path: Path,
    arch: str = "qwen2",
    *,
    corpus: Iterable[str] = (),
    tokenizer: bool = True,
    eos: bool = True,
    chat_template: bool = True,
    hidden: int = 64,
    layers: int = 2,
    seed: int = 0,
    max_positions: int = 256,
) -> Path:
    """Save a random tiny `arch` ("qwen2" or "llama") model and its BPE tokenizer under `path`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    if arch not in SPECIALS:
        raise ValueError(f"arch must be one of {sorted(SPECIALS)}")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tok = train_bpe(corpus, arch, eos=eos)
    if chat_template:
        tok.chat_template = CHATML if arch == "qwen2" else LLAMA_TEMPLATE
    ids = {
        "eos_token_id": tok.convert_tokens_to_ids(SPECIALS[arch]["eos"]),
        "pad_token_id": tok.pad_token_id,
        "bos_token_id": tok.bos_token_id,
    }
    shape = dict(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions)  # fmt: skip
    if arch == "qwen2":
        config = Qwen2Config(**shape, tie_word_embeddings=True, **ids)
        cls = Qwen2ForCausalLM
    else:
        config = LlamaConfig(**shape, tie_word_embeddings=False, **ids)
        cls = LlamaForCausalLM
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = cls(config)
    model.save_pretrained(path)
    if tokenizer:
        tok.save_pretrained(path)
    return path
