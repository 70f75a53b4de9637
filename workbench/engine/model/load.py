"""The policy model and its tokenizer: the built-in tiny GPT, or a local Hugging Face directory.

    task = load_task(cfg.task)
    model, tok = load_policy(cfg.model, task)          # "builtin:tiny": built once, then cached
    model_cfg = resolved_model(cfg.model, task)        # path = the absolute model folder (driver)
    model, tok = load_policy(model_cfg)                # in an actor: no task needed

"builtin:tiny" is built and cached by builtin.py. A GGUF file ("*.gguf") is converted once into a
Hugging Face folder cached by the file's hash (gguf.py), by the driver (`resolved_path`). A hub id ("Qwen/Qwen2.5-0.5B-Instruct", no local
folder of that name) is resolved by the driver, once, to its snapshot folder and commit
(`resolved_path`, through hub.py). Any other `path` is a local Hugging Face model directory, read
through `hf_dir` (its own tokenizer, EOS required, optional chat template). Tokenizers without a pad token get EOS as pad; padding is on the left
for generation; the model config's eos / pad ids are set to the tokenizer's. `policy_dir` gives
the folder without loading the model (vLLM).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from workbench.engine.model.builtin import BUILTIN_PREFIX, builtin_dir, load_builtin
from workbench.engine.model.devices import weights_dtype
from workbench.engine.model.gguf import gguf_folder, is_gguf_path, to_stderr
from workbench.engine.model.kernels import fast_kernels
from workbench.engine.model.hf_dir import check_model_dir, load_hf_dir, wants_chat_template


def policy_dir(model_cfg: Any, task: Any = None, *, progress: bool = False) -> Path:
    """The model folder for `model_cfg.path` without loading the model (vLLM loads it itself):
    the builtin cache entry (built first if absent) or the checked local directory."""
    if model_cfg.path.startswith(BUILTIN_PREFIX):
        return builtin_dir(model_cfg, task, progress=progress)[0]
    if is_gguf_path(model_cfg.path):  # the driver has converted it already (resolved_path): found in the cache
        return check_model_dir(gguf_folder(model_cfg.path, dtype=model_cfg.dtype, cache_dir=model_cfg.cache_dir))
    return check_model_dir(model_cfg.path)


def load_policy(
    model_cfg: Any, task: Any = None, *, device: str = "cpu", dtype: Any = None, compute: Any = None, progress: bool = True
) -> tuple[Any, Any]:
    """(model, tokenizer) for `model_cfg.path`: builtin:tiny (cached warm start) or a local HF dir.

    `dtype` overrides `model_cfg.dtype`; `compute` is the dtype the model will compute in when
    that differs from the weights' (the trainer's autocast over fp32 masters): it picks the
    kernels (kernels.py). The tokenizer pads on the left and has a pad token; with
    `task.chat_template` it must have a chat template.
    """
    dtype = weights_dtype(model_cfg.dtype if dtype is None else dtype, device)  # bad names fail first
    if model_cfg.path.startswith(BUILTIN_PREFIX):
        model, tokenizer = load_builtin(model_cfg, task, device=device, dtype=dtype, progress=progress)
    else:
        folder = policy_dir(model_cfg, task)
        model, tokenizer = load_hf_dir(folder, device=device, dtype=dtype, chat_template=wants_chat_template(task),
                                       template=getattr(model_cfg, "chat_template", None))  # fmt: skip
        model.workbench_info = {"from_cache": False, "dir": str(folder),
                                "params": sum(p.numel() for p in model.parameters())}  # fmt: skip
    compute = compute if isinstance(compute, torch.dtype) else next(model.parameters()).dtype
    return fast_kernels(model, compute, device), tokenizer


def resolved_path(model_cfg: Any) -> Any:
    """`model_cfg` with `path` absolute: a hub id becomes its snapshot folder, and `revision` the
    commit it resolved to (hub.py: downloaded once, or the cache alone offline); a GGUF file the
    Hugging Face folder converted from it (gguf.py: once, cached by its hash, in the run's dtype);
    a local folder is made absolute (with `revision` set only when the folder is that commit's snapshot)."""
    from workbench.engine.model.hub import is_hub_id, resolve_model, snapshot_id
    from workbench.errors import UserError

    path = model_cfg.path
    if path.startswith(BUILTIN_PREFIX):
        return model_cfg
    if is_gguf_path(path):
        if model_cfg.revision is not None:
            raise UserError(f"model.revision={model_cfg.revision!r} is for hub ids, but model.path {path!r} is a GGUF file: "
                            "drop model.revision")  # fmt: skip
        folder = gguf_folder(path, dtype=model_cfg.dtype, cache_dir=model_cfg.cache_dir, say=to_stderr)
        return dataclasses.replace(model_cfg, path=str(folder))
    if is_hub_id(path):
        snap = resolve_model(path, model_cfg.revision)
        return dataclasses.replace(model_cfg, path=str(snap.folder), revision=snap.commit)
    folder = Path(path).expanduser().resolve()
    if model_cfg.revision is not None and (snapshot_id(folder) or ("", ""))[1] != model_cfg.revision:
        raise UserError(f"model.revision={model_cfg.revision!r} is for hub ids, but model.path {path!r} is a local folder: "
                        "drop model.revision, or give the hub id")
    return dataclasses.replace(model_cfg, path=str(folder))


def resolved_model(model_cfg: Any, task: Any = None, *, progress: bool = False, run_dir: Any = None) -> Any:
    """`model_cfg` with `path` the absolute model folder: the builtin one (built first if absent)
    or the checked local directory. The driver resolves it once; actors then load the folder.
    With `run_dir` a builtin model is copied under `run_dir/model/`: the run folder is shared by
    every node (runs.checkpoint.require_shared), the model cache is only this node's."""
    d = Path(policy_dir(model_cfg, task, progress=progress)).resolve()
    if run_dir is not None and model_cfg.path.startswith(BUILTIN_PREFIX):
        d = copy_into(d, Path(run_dir).resolve() / "model")
    return dataclasses.replace(model_cfg, path=str(d))


def copy_into(folder: Path, parent: Path) -> Path:
    """`parent/<folder's name>`, copied there once (atomically: a reader sees all of it or none)."""
    import os
    import shutil
    import tempfile

    target = parent / folder.name
    if target.is_dir():
        return target
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=parent))
    shutil.copytree(folder, tmp, dirs_exist_ok=True)
    try:
        os.replace(tmp, target)
    except OSError:  # another process put it there first
        shutil.rmtree(tmp, ignore_errors=True)
    return target
