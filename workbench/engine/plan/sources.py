"""What the memory plan reads (the model's config.json or a GGUF header, the longest prompt), never waiting on the network.

    fields, where = model_config(cfg, task)      # config.json's fields; the folder or file they came from
    tokens, how = prompt_tokens(cfg, fields, where)   # the longest prompt in tokens, and where that figure came from

The model's config.json, first found of:
- builtin:tiny: its GPT-2 shape from model.n_* and the task's alphabet;
- a .gguf file: its header (gguf_config: the `gguf` package's GGUFReader reads the metadata and the
  tensors' shapes, never their data), its `<arch>.*` keys renamed to config.json's fields by the
  table transformers converts the file with (GGUF_CONFIG_MAPPING), so the plan's figures are the
  converted folder's; nothing is converted, and the tokenizer is the file's own (or its converted
  folder's, when a run has converted it already);
- a local model folder with config.json, or a config.json file itself (`--model path/to/config.json`);
- a hub id in the Hugging Face cache: its snapshot's config.json (`huggingface_hub.try_to_load_from_cache`,
  no request made), so an offline machine plans a model it has downloaded before;
- a hub id, online: when the hub answers within HUB_PROBE_S seconds, config.json and the tokenizer are
  downloaded (hub.resolve_model(weights=False), never the weights). Under HF_HUB_OFFLINE, or when the hub
  does not answer, one line says how to give the config instead (`--model DIR_OR_CONFIG`): the
  library's own retries (5, up to 8 s apart, each after a 10 s timeout) are never waited on.

The longest prompt (prompt_tokens, when `--prompt-tokens` is not given): the task's prompts, when
they are on this machine (a synthetic task, local files, or a hub dataset already in the datasets
cache; the task is loaded with the hub switched off, so the plan never downloads a dataset),
encoded with the model's own tokenizer (none beside config.json: their length in bytes, a bound on
their tokens); else the model's bound: its context (max_position_embeddings) less
generation.max_new_tokens, the longest prompt the run could be given. The plan says which. An
environment's episodes (task.name env) are planned at env.max_episode_tokens, their whole context.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional

from workbench.config import RunConfig
from workbench.errors import UserError

HUB_PROBE_S = 3.0  # seconds the hub gets to answer before the plan takes it as unreachable
GIVE_CONFIG = "give its config with `workbench plan --model DIR_OR_CONFIG` (a model folder or its config.json)"


def model_config(cfg: RunConfig, task: Any = None) -> tuple[dict[str, Any], Optional[Path]]:
    """(config.json's fields, the folder or file they came from; None for builtin) without any weights
    (a .gguf file: the fields from its header, and the file)."""
    from workbench.engine.model.builtin import BUILTIN_PREFIX
    from workbench.engine.model.gguf import check_gguf, is_gguf_path
    from workbench.engine.model.hub import is_hub_id

    m = cfg.model
    if m.path.startswith(BUILTIN_PREFIX):
        from workbench.engine.model.builtin import builtin_shape

        tok, n_pos = builtin_shape(task)
        return {"model_type": "gpt2", "vocab_size": len(tok), "n_embd": m.n_embd, "n_layer": m.n_layer,
                "n_head": m.n_head, "n_positions": n_pos, "tie_word_embeddings": True}, None  # fmt: skip
    d = Path(m.path).expanduser()
    if is_gguf_path(m.path):  # its header alone: a run converts it, the plan never does
        src = check_gguf(d)
        return gguf_config(src), src
    if m.path.endswith(".json") and not d.is_file():  # a config.json meant, not a hub id of that name
        raise UserError(f"model.path: no such file: {d} (a config.json, a model folder, a hub id or builtin:tiny)")
    if is_hub_id(m.path):
        d = hub_folder(m.path, m.revision)
    if d.is_file():  # a config.json given on its own
        return read_config_json(d), d
    if not d.is_dir():
        raise UserError(f"model.path: no such directory or file: {d} (a model folder with config.json, its config.json, "
                        "a hub id or builtin:tiny)")  # fmt: skip
    if not (d / "config.json").is_file():
        raise UserError(f"model.path: {d} has no config.json (the plan reads the model's shape from it)")
    return read_config_json(d / "config.json"), d


# GGUF architectures whose transformers model_type is another name (transformers' own renames)
GGUF_MODEL_TYPES = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss", "minimax-m2": "minimax_m2"}


def gguf_config(path: Path) -> dict[str, Any]:
    """A GGUF file's config.json fields from its header: `<arch>.*` keys renamed as transformers
    renames them when it loads the file (GGUF_CONFIG_MAPPING: llama.block_count -> num_hidden_layers,
    llama.embedding_length -> hidden_size, ...), tied embeddings where there is no `output.weight`
    tensor (transformers' rule), and the vocabulary (and GPT-2's positions) from the embedding
    tensors' shapes where no key gives it. No tensor's data is read."""
    import struct

    from gguf import GGUFReader
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING

    try:
        reader = GGUFReader(path)
    except (ValueError, struct.error, IndexError, EOFError, OSError) as e:  # a cut-off or malformed header
        raise UserError(f"model.path: cannot read the GGUF header of {path.name}: {e}") from None
    field = reader.fields.get("general.architecture")
    arch = str(field.contents()) if field is not None else ""
    model_type = GGUF_MODEL_TYPES.get(arch, arch)
    names = GGUF_CONFIG_MAPPING.get(model_type)
    if not arch or names is None or model_type in ("general", "tokenizer"):
        raise UserError(f"model.path: transformers cannot load {path.name} from GGUF: architecture {arch or 'unnamed'!r} "
                        "is not one it reads (a run could not convert it either)")  # fmt: skip
    data: dict[str, Any] = {"model_type": model_type}
    for key, f in reader.fields.items():
        prefix, _, rest = key.partition(".")
        if prefix == arch and names.get(rest) not in (None, -1):
            value = f.contents()
            data[names[rest]] = max(value) if isinstance(value, list) and value and isinstance(value[0], int) else value
    shapes = {t.name: [int(n) for n in t.shape] for t in reader.tensors}  # GGUF's order: [in, out]
    data["tie_word_embeddings"] = "output.weight" not in shapes
    if not data.get("vocab_size"):
        if "token_embd.weight" in shapes:
            data["vocab_size"] = shapes["token_embd.weight"][-1]
        elif "tokenizer.ggml.tokens" in reader.fields:
            data["vocab_size"] = len(reader.fields["tokenizer.ggml.tokens"].data)
    if model_type == "gpt2" and "position_embd.weight" in shapes:
        data["n_positions"] = shapes["position_embd.weight"][-1]
    return data


def read_config_json(path: Path) -> dict[str, Any]:
    """A config.json's fields (a folder: the one inside it); a multimodal one's `text_config`: the language model."""
    path = path / "config.json" if path.is_dir() else path
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"model.path: cannot read {path}: {e}") from None
    if not isinstance(data, dict):
        raise UserError(f"model.path: {path} is no config.json (a JSON object of the model's fields)")
    return data["text_config"] if isinstance(data.get("text_config"), dict) else data


def hub_folder(repo_id: str, revision: Optional[str]) -> Path:
    """The folder holding `repo_id`'s config.json: the cached snapshot, else (the hub answering) a
    download of its small files; else one line saying how to give the config (see the docstring)."""
    from huggingface_hub import constants, try_to_load_from_cache

    cached = try_to_load_from_cache(repo_id, "config.json", revision=revision or "main")
    if isinstance(cached, str):
        return Path(cached).parent  # the snapshot folder: the tokenizer, when cached, is beside it
    offline = constants.is_offline_mode()
    if not offline and hub_answers():
        from workbench.engine.model.hub import resolve_model

        return resolve_model(repo_id, revision, weights=False).folder
    why = "HF_HUB_OFFLINE is set" if offline else f"the hub ({constants.ENDPOINT}) did not answer within {HUB_PROBE_S:g} s"
    rev = f" --revision {revision}" if revision else ""
    raise UserError(f"model.path: {repo_id!r} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and {why}: "
                    f"{GIVE_CONFIG}, or fetch it once with `hf download {repo_id} config.json{rev}`")  # fmt: skip


def hub_answers(timeout: float = HUB_PROBE_S) -> bool:
    """Whether the hub answers a HEAD request within `timeout` seconds (any status: it is there)."""
    from huggingface_hub import constants, get_session

    try:
        get_session().head(constants.ENDPOINT, timeout=timeout)
    except Exception:  # noqa: BLE001 - refused, timed out, no route, a proxy's error: the hub is not there for the plan
        return False
    return True


@contextmanager
def hub_offline(datasets_too: bool) -> Iterator[None]:
    """huggingface_hub (and `datasets`) in offline mode for the block: the cache answers and no request
    is made. Both read HF_HUB_OFFLINE once, at import, into these constants and check them per call."""
    from huggingface_hub import constants

    mods: list[Any] = [constants]
    if datasets_too:  # imported here, before the switch, so that it never reads the switched value as its own
        import datasets.config

        mods.append(datasets.config)
    saved = [mod.HF_HUB_OFFLINE for mod in mods]
    try:
        for mod in mods:
            mod.HF_HUB_OFFLINE = True
        yield
    finally:
        for mod, value in zip(mods, saved):
            mod.HF_HUB_OFFLINE = value


def local_task(cfg: RunConfig) -> tuple[Any, str]:
    """The task as loaded from this machine alone (hub datasets from the datasets cache), or (None, why not)."""
    from workbench.tasks.base import load_task

    t = cfg.task
    hub_data = any(s.name == "hf" for s in ([t] + list(t.mix)))
    try:
        with hub_offline(datasets_too=hub_data):
            return load_task(t), ""
    except UserError as e:
        if "datasets cache" in str(e):
            return None, "the task's dataset is not in the datasets cache"
        return None, f"the task cannot be loaded here ({e})"


def prompt_tokens(cfg: RunConfig, fields: dict[str, Any], where: Optional[Path], task: Any, why: str = "") -> tuple[int, str]:
    """The longest prompt in tokens (the 8 longest by characters, encoded) and how it was found; the
    model's bound when the task (`why` not) or the tokenizer is not on this machine (see the docstring).
    An environment's episode is its whole context: env.max_episode_tokens less one turn's tokens."""
    if cfg.task.name == "env":
        return (cfg.env.max_episode_tokens - cfg.generation.max_new_tokens,
                "env.max_episode_tokens less generation.max_new_tokens: an episode's prompt, earlier turns and the environment's messages")  # fmt: skip
    if task is not None:
        prompts = sorted((ex.prompt for ex in list(task.train) + list(task.val)), key=len)[-8:]
        if where is None:  # builtin: one token per character
            return max(len(p) for p in prompts), "the task's longest prompt"
        counted = _encoded(cfg, where, prompts)
        if counted is not None:
            return counted, "the task's longest prompt"
        # byte-level BPE and byte-fallback vocabularies spend at least one byte a token
        chat = " before the chat template" if _chat(cfg) else ""
        return max(len(p.encode()) for p in prompts), (f"the task's longest prompt in bytes{chat}, a bound on its tokens: "
                                                      f"no tokenizer is beside {where}")  # fmt: skip
    return model_bound(cfg, fields, why)


def model_bound(cfg: RunConfig, fields: dict[str, Any], why: str) -> tuple[int, str]:
    """The longest prompt the run could take: the model's context less generation.max_new_tokens."""
    context = int(fields.get("max_position_embeddings") or fields.get("n_positions") or 0)
    new = cfg.generation.max_new_tokens
    if not context:
        raise UserError(f"{why}, and the model's config.json names no context length: give --prompt-tokens N (the longest prompt)")
    if context <= new:
        raise UserError(f"generation.max_new_tokens={new:,} leaves no room for a prompt in the model's context of {context:,} "
                        "tokens (max_position_embeddings): lower it")  # fmt: skip
    return context - new, (f"the model's bound: its context of {context:,} tokens less {new:,} new tokens, as {why}; "
                           "--prompt-tokens N plans your longest prompt")  # fmt: skip


def _encoded(cfg: RunConfig, where: Path, prompts: list[str]) -> Optional[int]:
    """The most tokens among `prompts` under the model's own tokenizer (chat template as the task
    says); None when there is no tokenizer beside config.json (a config.json alone, a small download).
    A GGUF file's tokenizer: its converted folder's when a run has converted it, else read from the file."""
    from workbench.engine.model.gguf import is_gguf_path
    from workbench.engine.model.hf_dir import TOKENIZER_FILES, prompt_ids

    gguf = is_gguf_path(where) and where.is_file()
    folder = (converted_folder(cfg, where) if gguf else where if where.is_dir()
              else where.parent if where.name == "config.json" else None)  # fmt: skip
    if not gguf and (folder is None or not any((folder / f).is_file() for f in TOKENIZER_FILES)):
        return None
    from transformers import AutoTokenizer

    from workbench.engine.model.logs import no_progress_bars

    try:
        with no_progress_bars():
            tok = (AutoTokenizer.from_pretrained(folder, local_files_only=True) if folder is not None else
                   AutoTokenizer.from_pretrained(where.parent, gguf_file=where.name, local_files_only=True))  # fmt: skip
        return max(len(prompt_ids(tok, p, chat_template=_chat(cfg))) for p in prompts)
    except (OSError, ValueError):  # an unreadable tokenizer, or none of its chat template: the bytes bound instead
        return None


def converted_folder(cfg: RunConfig, src: Path) -> Optional[Path]:
    """The folder a run converted the GGUF file `src` into (engine/model/gguf.gguf_folder, any dtype:
    they share the tokenizer), if there is one; None: not converted (the plan never converts it)."""
    from workbench.engine.model.gguf import SOURCE_FILE, file_sha256

    root = Path(cfg.model.cache_dir).expanduser() / "gguf"
    if not root.is_dir():
        return None
    done = [d for d in sorted(root.glob(f"{file_sha256(src)}-*")) if (d / SOURCE_FILE).is_file()]
    return done[0] if done else None


def _chat(cfg: RunConfig) -> bool:
    return bool(cfg.task.chat_template or any(s.chat_template for s in cfg.task.mix))
