"""The trained policy out of a run: a Hugging Face folder from any of its checkpoints.

A checkpoint holds the trainer's fp32 master weights as a `torch.distributed.checkpoint` folder,
written by one or by many FSDP2 workers (the layout in `runs/checkpoint.py`). Exporting reads only
the weights (not the AdamW states) into the run's own model architecture, casts them to the model's
own dtype (config.json's `dtype`/`torch_dtype`; float32 when it names none) and writes what any
Hugging Face tool loads: safetensors, config.json, generation_config.json and the tokenizer.

    result = export_policy("runs/my-run")                      # the last checkpoint -> runs/my-run/policy
    result = export_policy("runs/my-run", "out/p", step=400)   # a given step, a given folder
    AutoModelForCausalLM.from_pretrained(result.out)            # or vllm.LLM(model=str(result.out))

`workbench export RUN [--step N] --out DIR` is the command; a finished run exports its final policy
to <run>/policy/ unless `checkpoint.export_policy` is false; `Session.export` and `RunView.export`
call the same function. The folder is written beside its target and renamed into place; an existing
folder is replaced only when it is an earlier export (it holds EXPORT_MARKER).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from workbench.errors import UserError
from workbench.runs.checkpoint import POLICY_PREFIX, TRAINER_DCP, CheckpointStore

EXPORT_MARKER = "workbench_export.json"
POLICY_DIR = "policy"  # <run>/policy: where a finished run leaves its final policy


@dataclass(frozen=True)
class PolicyExport:
    """Where the policy went, from which checkpoint and source model, in which dtype."""

    out: Path
    run: Path
    step: int
    source: Path  # the model folder the run started from (architecture, tokenizer)
    dtype: str
    params: int

    def __str__(self) -> str:
        return f"policy of step {self.step} exported to {self.out} ({self.params:,} parameters, {self.dtype})"


def source_model_dir(run: Path, model_path: str) -> Path:
    """The model folder the run trained: a builtin model's copy under <run>/model/, else model.path."""
    if model_path.startswith("builtin:"):
        copies = sorted(p for p in (run / "model").glob("*") if (p / "config.json").is_file())
        if len(copies) != 1:
            found = ", ".join(p.name for p in copies) or "none"
            raise UserError(f"{run / 'model'}: expected the one builtin model folder the run copied there, found {found}")
        return copies[0]
    folder = Path(model_path).expanduser()
    if not (folder / "config.json").is_file():
        raise UserError(f"the run's model folder {folder} (model.path) is gone or holds no config.json: "
                        "the export needs it for the architecture and the tokenizer")  # fmt: skip
    return folder


def checkpoint_dir(run: Path, step: Optional[int]) -> tuple[int, Path]:
    """(step, folder) of the checkpoint to export: `step`, else the latest; one line when absent."""
    store = CheckpointStore(run / "checkpoints")
    steps = store.steps()
    if not steps:
        raise UserError(f"{run} holds no checkpoint to export (checkpoints/step_*): the run saved none yet")
    if step is None:
        step = store.latest_step()  # LATEST, else the highest complete step
    elif step not in steps:
        raise UserError(f"{run} has no checkpoint of step {step}; it has steps {', '.join(map(str, steps))}")
    folder = store.path_for(step)
    if not (folder / TRAINER_DCP).is_dir():
        raise UserError(f"{folder} holds no {TRAINER_DCP}/ (a checkpoint of an older format): resume the run to write one")
    return step, folder


def own_dtype(source: Path) -> Any:
    """The dtype the model's config.json names (`dtype`, or `torch_dtype` before transformers 4.56);
    float32 when it names none (loading in float32 rewrites the in-memory config, so the file is read)."""
    import torch

    data = json.loads((source / "config.json").read_text())
    name = data.get("dtype") or data.get("torch_dtype") or "float32"
    dtype = getattr(torch, str(name).replace("torch.", ""), None)
    return dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else torch.float32


def _read_weights(model: Any, dcp_dir: Path) -> None:
    """Fill `model` (fp32, unsharded) in place with the checkpoint's weights, written by any worker count."""
    import warnings

    import torch.distributed.checkpoint as dcp

    state = {f"{POLICY_PREFIX}{k}": v for k, v in model.state_dict().items()}  # tied names share one tensor
    with warnings.catch_warnings():  # DCP warns that it runs without a process group: we mean it
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
        try:
            dcp.load({"model": state}, checkpoint_id=str(dcp_dir), no_dist=True)
        except Exception as e:  # noqa: BLE001 - DCP raises its own types for a missing or foreign key
            raise UserError(f"{dcp_dir}: its weights do not fit the run's model ({str(e).splitlines()[0][:200]})") from None


def _replace_dir(tmp: Path, out: Path) -> None:
    if out.exists():
        if not (out / EXPORT_MARKER).is_file():
            shutil.rmtree(tmp, ignore_errors=True)
            raise UserError(f"{out} exists and is not an earlier export: pick another --out (nothing was overwritten)")
        shutil.rmtree(out)
    tmp.rename(out)


def export_policy(run: str | Path, out: str | Path | None = None, step: Optional[int] = None) -> PolicyExport:
    """Write the policy of `run`'s checkpoint `step` (default: the latest) as a Hugging Face folder
    at `out` (default: <run>/policy); see the module docstring."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from workbench.runs.folder import run_folder, saved_config

    run = run_folder(run)
    cfg = saved_config(run)
    if cfg is None:
        raise UserError(f"{run} holds no config.json: not a run folder this version can export")
    step, ckpt = checkpoint_dir(run, step)
    source = source_model_dir(run, cfg.model.path)
    out = Path(out).expanduser().resolve() if out is not None else run / POLICY_DIR
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32, local_files_only=True)
    _read_weights(model, ckpt / TRAINER_DCP)
    dtype = own_dtype(source)
    model = model.to(dtype)
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(tmp, safe_serialization=True)
    AutoTokenizer.from_pretrained(source, local_files_only=True).save_pretrained(tmp)
    result = PolicyExport(out=out, run=run, step=step, source=source, dtype=str(dtype).replace("torch.", ""),
                          params=sum(p.numel() for p in model.parameters()))  # fmt: skip
    marker = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(result).items()}
    (tmp / EXPORT_MARKER).write_text(json.dumps(marker, indent=1))
    _replace_dir(tmp, out)
    return result


def export_final(run: str | Path, tell: Callable[[str], None]) -> dict[str, Any]:
    """A finished run's last checkpoint to <run>/policy (the engine calls it at the end): {"path",
    "step"}, or {"error"} with the reason told through `tell`; a failed export never fails the run."""
    try:
        result = export_policy(run)
    except Exception as e:  # noqa: BLE001 - the run's steps are done and checkpointed: say it, keep them
        line = str(e).splitlines()[0] if str(e) else type(e).__name__
        tell(f"the final policy was not exported ({line}); `workbench export {run}` retries from the checkpoint")
        return {"error": line}
    tell(str(result))
    return {"path": str(result.out), "step": result.step}
