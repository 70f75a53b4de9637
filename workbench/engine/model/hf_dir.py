"""Local Hugging Face model folders: checks, the tokenizer, and how prompts become token ids.

(A hub id is resolved to its snapshot folder before it gets here: load.resolved_path, hub.py. A
snapshot folder absent on this node is read from this node's HF cache at the same commit.)

Every backend (torch generator, vLLM generator, trainer, evaluator) reads a model folder and
its tokenizer through here, so all of them agree on the ids:

    d = check_model_dir("~/models/qwen2-0.5b")             # UserError naming what is missing
    tok = load_tokenizer(d, chat_template=True)            # left padding, pad token, EOS checked
    ids = prompt_ids(tok, "07+45=", chat_template=True)    # the chat template's generation prompt

- The tokenizer must be the folder's own (tokenizer.json, or a slow tokenizer's vocabulary
  files): transformers would otherwise build an empty one silently.
- It must have an EOS token (generation stops on it; the interruption phrase and the scoring
  use the same tokenizer). Without a pad token, EOS pads (padding is masked out, so the two may
  share an id); a pad token distinct from EOS is kept.
- `task.chat_template: true` wraps each prompt as one user message with
  `apply_chat_template(..., add_generation_prompt=True)`; a tokenizer without a template is
  refused up front.

    python -c "from workbench.engine.model.hf_dir import load_tokenizer; print(load_tokenizer('PATH'))"
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from workbench.engine.model.devices import weights_dtype
from workbench.engine.model.logs import no_progress_bars
from workbench.errors import UserError

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
# A fast tokenizer's tokenizer.json, or the vocabulary files a slow tokenizer is built from.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model", "sentencepiece.bpe.model")


def check_model_dir(path: str | Path) -> Path:
    """The folder as a Path, once it has a config, weights and tokenizer files; else a UserError."""
    d = Path(path).expanduser()
    if not d.is_dir():
        from workbench.engine.model.hub import node_snapshot

        # a hub snapshot the driver resolved, absent here (a node-local HF cache): the same commit from this node's
        d = node_snapshot(d) or d
    if not d.is_dir():
        raise UserError(f"model.path: no such directory: {d} (a hub id, a local Hugging Face model directory or builtin:tiny)")
    if not (d / "config.json").is_file():
        raise UserError(f"model.path: {d} has no config.json (not a Hugging Face model directory)")
    if not any((d / name).is_file() for name in WEIGHT_FILES) and not list(d.glob("*.safetensors")):
        raise UserError(f"model.path: {d} has no weights (expected one of {', '.join(WEIGHT_FILES)})")
    if not any((d / f).is_file() for f in TOKENIZER_FILES):
        raise UserError(
            f"model.path: {d} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); "
            "save the model's tokenizer beside it with tokenizer.save_pretrained(path)"
        )
    return d


def prepare_tokenizer(tokenizer: Any, model: Any = None, *, where: str = "") -> Any:
    """Pad token (EOS if none), left padding, and the model config's ids set to match."""
    if tokenizer.eos_token_id is None:
        src = f" in {where}" if where else ""
        raise UserError(
            f"model.path: the tokenizer{src} has no EOS token, so generation could never stop; "
            "set eos_token in its tokenizer_config.json"
        )
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    if model is not None:
        for cfg in (model.config, getattr(model, "generation_config", None)):
            if cfg is not None:
                cfg.eos_token_id = tokenizer.eos_token_id
                cfg.pad_token_id = tokenizer.pad_token_id
    return tokenizer


def check_chat_template(tokenizer: Any, wanted: bool, *, where: str = "") -> None:
    """UserError when the task asks for the chat template and the tokenizer has none."""
    if wanted and not getattr(tokenizer, "chat_template", None):
        src = f" in {where}" if where else ""
        raise UserError(
            f"task.chat_template is true but the tokenizer{src} has no chat template; "
            "set task.chat_template: false, or use a model whose tokenizer_config.json has one"
        )


def load_tokenizer(path: str | Path, *, chat_template: bool = False, template: Optional[str] = None) -> Any:
    """The folder's own tokenizer, prepared for generation (see the module docstring); `template`
    (model.chat_template: a .jinja file or the text) replaces its chat template."""
    from transformers import AutoTokenizer

    d = check_model_dir(path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(d, local_files_only=True)
    except (OSError, ValueError) as e:
        raise UserError(f"model.path: cannot load a tokenizer from {d}: {e}") from None
    if template is not None:
        from workbench.config.model import template_text

        tokenizer.chat_template = template_text(template)
    prepare_tokenizer(tokenizer, where=str(d))
    check_chat_template(tokenizer, chat_template, where=str(d))
    return tokenizer


def check_vocab(tokenizer: Any, model: Any, where: str) -> None:
    """Every token id must index the model's embedding (a mismatched tokenizer fails here, not mid-run)."""
    rows = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > rows:
        raise UserError(
            f"model.path: the tokenizer in {where} has {len(tokenizer)} tokens but the model's embedding has "
            f"{rows} rows; the tokenizer does not belong to this model"
        )


def prompt_ids(tokenizer: Any, text: str | list[dict[str, str]], *, chat_template: bool = False) -> list[int]:
    """Token ids of one prompt: the text as is, or wrapped as a user turn by the chat template; a
    list of {role, content} messages (tasks/chat.chat_prompt: the system prompt, a conversation) goes
    through the chat template as it is."""
    if not chat_template and isinstance(text, str):
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    messages = [{"role": "user", "content": text}] if isinstance(text, str) else text
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = out["input_ids"] if hasattr(out, "keys") else out  # a BatchEncoding (transformers 5) or a list
    return [int(t) for t in ids]


def load_hf_dir(path: str | Path, *, device: str = "cpu", dtype: Any = None, chat_template: bool = False,
                template: Optional[str] = None) -> tuple[Any, Any]:  # fmt: skip
    """Model + tokenizer from a local Hugging Face directory; clear errors for what is missing."""
    from transformers import AutoModelForCausalLM

    d = check_model_dir(path)
    tokenizer = load_tokenizer(d, chat_template=chat_template, template=template)
    try:
        with no_progress_bars():
            model = AutoModelForCausalLM.from_pretrained(d, local_files_only=True, dtype=weights_dtype(dtype, device))
    except (OSError, ValueError) as e:
        raise UserError(f"model.path: cannot load the model from {d}: {e}") from None
    check_vocab(tokenizer, model, str(d))
    prepare_tokenizer(tokenizer, model)
    return model.to(device), tokenizer


def wants_chat_template(task: Any) -> bool:
    """Whether the task's prompts go through the tokenizer's chat template (`task.chat_template`)."""
    return bool(getattr(task, "chat_template", False))
