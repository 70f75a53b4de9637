"""The trained policy out of a run: a Hugging Face folder from any of its checkpoints.

A checkpoint holds the trainer's fp32 master weights as a `torch.distributed.checkpoint` folder,
written by one or by many FSDP2 workers (the layout in `runs/checkpoint.py`); a step pruned from
the full checkpoints keeps its policy snapshot (the weights in the export's dtype), so every step
ever saved exports. Exporting reads only the weights (not the AdamW states) into the run's own
model architecture, casts them to the model's own dtype (config.json's `dtype`/`torch_dtype`;
float32 when it names none) and writes what any Hugging Face tool loads: safetensors,
config.json, generation_config.json and the tokenizer.

    result = export_policy("runs/my-run")                      # the last checkpoint -> runs/my-run/policy
    result = export_policy("runs/my-run", "out/p", step=400)   # a given step, a given folder
    AutoModelForCausalLM.from_pretrained(result.out)            # or vllm.LLM(model=str(result.out))

A `model.lora` run's checkpoint holds the adapters alone (runs/checkpoint.py; one of an earlier
version also holds the frozen base, which is not read): the base comes from the run's model folder
again. The export is the merged policy (PEFT's `merge_and_unload`: the adapters folded into the
weights, a plain model as above), or with `adapter=True` the adapters alone in PEFT's own layout
(adapter_config.json and adapter_model.safetensors in fp32), which
`peft.PeftModel.from_pretrained(base, folder)` loads onto the base (default folder: <run>/adapter).
Its `base_model_name_or_path` names the hub id the run trained (and `revision` its commit) when the
model came from the hub, so the folder can be shared as it is; a local folder (or the folder a
GGUF file was converted to) is named by its path (`adapter_base`).

`load_policy(run, step)` reads a checkpoint's policy into the run's model without writing a folder
(fp32, full-weight runs), for pushing it into a running engine as the trainer pushes.

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
from workbench.runs.checkpoint import (POLICY_PREFIX, TRAINER_DCP, CheckpointStore, own_dtype, read_policy_snapshot,
                                       source_model_dir)

EXPORT_MARKER = "workbench_export.json"
POLICY_DIR = "policy"  # <run>/policy: where a finished run leaves its final policy
ADAPTER_DIR = "adapter"  # <run>/adapter: `workbench export --adapter`'s default folder


@dataclass(frozen=True)
class PolicyExport:
    """Where the policy went, from which checkpoint and source model, in which dtype."""

    out: Path
    run: Path
    step: int
    source: Path  # the model folder the run started from (architecture, tokenizer)
    dtype: str
    params: int
    kind: str = "policy"  # "adapter": a LoRA run's adapters alone, in PEFT's layout

    def __str__(self) -> str:
        return f"{self.kind} of step {self.step} exported to {self.out} ({self.params:,} parameters, {self.dtype})"


def step_list(steps: list[int]) -> str:
    """Steps in one short phrase: a run of equal strides as "50 to 800 every 50", others listed."""
    out: list[str] = []
    i = 0
    while i < len(steps):
        j = i + 1
        while j + 1 < len(steps) and steps[j + 1] - steps[j] == steps[i + 1] - steps[i]:
            j += 1
        if j - i >= 3:  # 4 or more evenly spaced steps
            out.append(f"{steps[i]} to {steps[j]} every {steps[i + 1] - steps[i]}")
            i = j + 1
        else:
            out.append(str(steps[i]))
            i += 1
    return ", ".join(out)


def checkpoint_source(run: Path, step: Optional[int]) -> tuple[int, Path, bool]:
    """(step, folder, is a snapshot) of the policy to export: `step`, else the latest; the folder is
    the checkpoint's `TRAINER_DCP` or a pruned step's policy snapshot; one line when absent."""
    store = CheckpointStore(run / "checkpoints")
    steps = store.exportable_steps()
    if not steps:
        raise UserError(f"{run} holds no checkpoint to export (checkpoints/step_*): the run saved none yet")
    if step is None:
        latest = store.latest_step()  # LATEST, else the highest complete step
        step = steps[-1] if latest is None else latest
    elif step not in steps:
        raise UserError(f"{run} saved no checkpoint at step {step}: the steps that can be exported are {step_list(steps)}")
    if step not in store.steps():
        return step, store.policy_path(step), True
    folder = store.path_for(step)
    if not (folder / TRAINER_DCP).is_dir():
        raise UserError(f"{folder} holds no {TRAINER_DCP}/ (a checkpoint of an older format): resume the run to write one")
    return step, folder / TRAINER_DCP, False


def _read_weights(model: Any, dcp_dir: Path, only: Optional[set[str]] = None) -> None:
    """Fill `model` (fp32, unsharded) in place with the checkpoint's weights, written by any worker
    count; `only`: those names alone (a LoRA run's adapters: the base is the model folder's)."""
    import warnings

    import torch.distributed.checkpoint as dcp

    state = {f"{POLICY_PREFIX}{k}": v for k, v in model.state_dict().items() if only is None or k in only}  # tied names share one tensor
    with warnings.catch_warnings():  # DCP warns that it runs without a process group: we mean it
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
        try:
            dcp.load({"model": state}, checkpoint_id=str(dcp_dir), no_dist=True)
        except Exception as e:  # noqa: BLE001 - DCP raises its own types for a missing or foreign key
            raise UserError(f"{dcp_dir}: its weights do not fit the run's model ({str(e).splitlines()[0][:200]})") from None


def _read_snapshot(model: Any, folder: Path, only: Optional[set[str]] = None) -> None:
    """Fill `model` (fp32) with a policy snapshot's weights (already in the export's dtype: the
    round trip through fp32 is exact, so the export equals the one made from the full checkpoint);
    `only`: those names alone, each of which the snapshot must hold (a LoRA run's adapters)."""
    weights = read_policy_snapshot(folder)
    if only is not None:
        missing = sorted(only - set(weights))
        if missing:
            raise UserError(f"{folder}: its weights do not fit the run's adapters (it lacks {missing[0]})")
        weights = {k: v for k, v in weights.items() if k in only}
    try:
        model.load_state_dict(weights, strict=only is None)
    except RuntimeError as e:
        raise UserError(f"{folder}: its weights do not fit the run's model ({str(e).splitlines()[0][:200]})") from None


def adapter_base(source: Path) -> tuple[str, Optional[str]]:
    """What an exported adapter names as its base: (hub id, commit) when `source` is a hub model's
    snapshot folder (the run resolved model.path's id to it), else (the folder's path, None)."""
    from workbench.config.model import snapshot_id

    ident = snapshot_id(source)
    return (ident[0], ident[1]) if ident is not None else (str(source), None)


def _replace_dir(tmp: Path, out: Path) -> None:
    if out.exists():
        if not (out / EXPORT_MARKER).is_file():
            shutil.rmtree(tmp, ignore_errors=True)
            raise UserError(f"{out} exists and is not an earlier export: pick another --out (nothing was overwritten)")
        shutil.rmtree(out)
    tmp.rename(out)


def _run_and_config(run: str | Path) -> tuple[Path, Any]:
    """The run's folder and the config it saved (one line when it has none)."""
    from workbench.runs.folder import run_folder, saved_config

    run = run_folder(run)
    cfg = saved_config(run)
    if cfg is None:
        raise UserError(f"{run} holds no config.json: not a run folder this version can export")
    return run, cfg


def load_policy(run: str | Path, step: int, model: Any = None) -> Any:
    """The run's model in fp32 holding checkpoint `step`'s policy (the trainer's master weights),
    no folder written: `model`, an earlier call's result for the same run, filled again in place,
    else loaded from the run's source model. Scoring many checkpoints in one engine pushes these
    (engine/weights.policy_push) where an export per step would start an engine per step. A
    `model.lora` run: export_policy merges its adapters."""
    import torch
    from transformers import AutoModelForCausalLM

    run, cfg = _run_and_config(run)
    if cfg.model.lora is not None:
        raise UserError(f"{run} trained LoRA adapters: export_policy(run, step={step}) merges them into a policy")
    step, weights, snapshot = checkpoint_source(run, step)
    if model is None:
        model = AutoModelForCausalLM.from_pretrained(source_model_dir(run, cfg.model.path), dtype=torch.float32,
                                                     local_files_only=True)  # fmt: skip
    (_read_snapshot if snapshot else _read_weights)(model, weights)
    return model


def export_policy(run: str | Path, out: str | Path | None = None, step: Optional[int] = None,
                  adapter: bool = False) -> PolicyExport:  # fmt: skip
    """Write the policy of `run`'s checkpoint `step` (default: the latest) as a Hugging Face folder
    at `out` (default: <run>/policy); `adapter`: a LoRA run's adapters alone (default: <run>/adapter).
    See the module docstring."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from workbench.config.lora import adapter_names

    run, cfg = _run_and_config(run)
    lora = cfg.model.lora
    if adapter and lora is None:
        raise UserError(f"{run} was trained without model.lora: it has no adapter to export; drop --adapter to export its policy")
    step, weights, snapshot = checkpoint_source(run, step)
    source = source_model_dir(run, cfg.model.path)
    out = Path(out).expanduser().resolve() if out is not None else run / (ADAPTER_DIR if adapter else POLICY_DIR)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32, local_files_only=True)
    base_name, base_revision = adapter_base(source)
    model.name_or_path = base_name  # what PEFT writes into adapter_config.json and the model card
    # as the trainer wrapped it: its checkpoint holds the names of `.get_base_model()`, the adapters' alone
    wrapped = lora.peft_model(model) if lora is not None else None
    target = model if wrapped is None else wrapped.get_base_model()
    only = None if wrapped is None else adapter_names(target)
    (_read_snapshot if snapshot else _read_weights)(target, weights, only)
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    if adapter:  # adapter_config.json + adapter_model.safetensors, the adapters in the trainer's fp32
        wrapped.peft_config["default"].base_model_name_or_path = base_name
        wrapped.peft_config["default"].revision = base_revision
        wrapped.save_pretrained(tmp)
        dtype, params = torch.float32, sum(p.numel() for n, p in wrapped.named_parameters() if "lora_" in n)
    else:
        model = wrapped.merge_and_unload() if wrapped is not None else model  # W + (alpha / r) B A, in fp32
        dtype = own_dtype(source)
        model = model.to(dtype)
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
        if cfg.model.chat_template is not None:  # the template it was trained with (the run's config holds its text)
            from workbench.config.model import template_text

            tokenizer.chat_template = template_text(cfg.model.chat_template)
        tokenizer.save_pretrained(tmp)
        params = sum(p.numel() for p in model.parameters())
    result = PolicyExport(out=out, run=run, step=step, source=source, dtype=str(dtype).replace("torch.", ""),
                          params=params, kind="adapter" if adapter else "policy")  # fmt: skip
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
