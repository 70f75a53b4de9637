"""Atomic, step-numbered checkpoints: `checkpoints/step_000050/{trainer_dcp/,trainer_meta.pt,state.json}`.

A checkpoint is written into a temporary folder and renamed into place only when complete,
then `LATEST` is replaced; a run killed at any moment leaves the previous checkpoint intact.
The oldest checkpoints beyond `keep` are pruned to their policy: the weights alone, in the dtype an
export writes (the model's own), as safetensors in `checkpoints/policies/step_000050/`, so every
step ever saved can still be exported (`workbench export RUN --step N`) while only the last `keep`
steps hold the full state a resume needs (fp32 weights and AdamW's two moments: 12 bytes a
parameter, against 2 for a bf16 policy). A kept step has no snapshot: its full state holds the policy.

A `model.lora` run's checkpoint holds what it trained alone: the adapters and their AdamW states
(engine/train/fsdp.save_state), not the frozen base, which a resume and an export read from the
run's model folder (model.path) again. For Qwen2.5-7B at rank 16 that is about 0.5 GB a checkpoint
where the base and its fp32 states would be about 91 GB (benchmarks/bench_lora_checkpoint.py). Its
snapshots keep the adapters in fp32 (`ADAPTER_MARKS`): the adapter export of a pruned step equals
the one of its full checkpoint.

The coordinator writes the folders and every trainer worker writes its shards into them, each
on its own node, so the run folder must be one folder on every node. `shared_token(out_dir)`
and `require_shared(out_dir, views)` are the one rule for that, checked when trainers start:

    with shared_token(out_dir) as (path, token):                 # in the coordinator
        views = [worker.sees(str(path), token) for each worker]  # reads_token(path, token) there
    require_shared(out_dir, views)                               # a UserError naming the node
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import warnings
from pathlib import Path
from typing import Any, Iterator, Optional

from workbench.errors import UserError

SHARED_CHECK_PREFIX = ".shared-check-"
# The trainer's state in a checkpoint folder: TRAINER_DCP/, a torch.distributed.checkpoint folder of
# {"model": the policy's state dict, "optim": AdamW's} written by every worker (engine/train/fsdp.py),
# and trainer_meta.pt. The policy module holds the Hugging Face model as `.model`, so a weight's key
# under "model" is POLICY_PREFIX + its Hugging Face name (what runs/export.py reads).
TRAINER_DCP = "trainer_dcp"
POLICY_PREFIX = "model."
POLICIES = "policies"  # checkpoints/policies/step_NNNNNN/: a pruned step's policy snapshot
ADAPTER_MARKS = (".lora_A.", ".lora_B.")  # a LoRA adapter tensor's name holds one (engine/model/lora.py)
SNAPSHOT_PART_BYTES = 1 << 30  # fp32 bytes read per snapshot file: bounds the memory a prune takes on a 7B model


class CheckpointStore:
    def __init__(self, root: str | Path, keep: int = 2):
        self.root = Path(root)
        self.keep = max(1, keep)

    def path_for(self, step: int) -> Path:
        return self.root / f"step_{step:06d}"

    def policy_path(self, step: int) -> Path:
        """Where the policy snapshot of a pruned step lives (see the module docstring)."""
        return self.root / POLICIES / f"step_{step:06d}"

    def begin(self, step: int) -> Path:
        tmp = self.root / f".tmp_step_{step:06d}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        return tmp

    def commit(self, step: int, state: dict[str, Any]) -> Path:
        tmp = self.root / f".tmp_step_{step:06d}"
        (tmp / "state.json").write_text(json.dumps(state, indent=1, default=float))
        final = self.path_for(step)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        latest_tmp = self.root / "LATEST.tmp"
        latest_tmp.write_text(final.name)
        latest_tmp.replace(self.root / "LATEST")
        self._prune()
        return final

    def steps(self) -> list[int]:
        if not self.root.exists():
            return []
        return sorted(int(p.name[5:]) for p in self.root.glob("step_*") if (p / "state.json").exists())

    def latest_step(self) -> Optional[int]:
        latest = self.root / "LATEST"
        if latest.exists():
            name = latest.read_text().strip()
            if (self.root / name / "state.json").exists():
                return int(name[5:])
        steps = self.steps()
        return steps[-1] if steps else None

    def snapshot_steps(self) -> list[int]:
        """The pruned steps whose policy was kept (a snapshot folder is renamed into place only when whole)."""
        folder = self.root / POLICIES
        return sorted(int(p.name[5:]) for p in folder.glob("step_*")) if folder.is_dir() else []

    def exportable_steps(self) -> list[int]:
        """Every step whose policy can be exported: the full checkpoints and the pruned steps' snapshots."""
        return sorted(set(self.steps()) | set(self.snapshot_steps()))

    def latest_state(self) -> Optional[dict[str, Any]]:
        step = self.latest_step()
        if step is None:
            return None
        return json.loads((self.path_for(step) / "state.json").read_text())

    def _prune(self) -> None:
        for step in self.steps()[: -self.keep]:
            self._keep_policy(step)
            shutil.rmtree(self.path_for(step), ignore_errors=True)

    def _keep_policy(self, step: int) -> None:
        """The snapshot of `step` before its full state goes; a failed one is a warning, not a failed
        run (the step is then pruned as before this existed, so the disk stays bounded)."""
        source, dest = self.path_for(step) / TRAINER_DCP, self.policy_path(step)
        if dest.exists() or not source.is_dir():  # done already (a prune cut short), or an older format
            return
        try:
            write_policy_snapshot(source, dest, policy_dtype(self.root.parent))
        except Exception as e:  # noqa: BLE001 - the run and its newer checkpoints matter more than one old step
            why = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            warnings.warn(f"checkpoint step {step}: its policy snapshot was not written ({why}); "
                          f"`workbench export --step {step}` will not find it", stacklevel=2)


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


def own_dtype(source: Path) -> Any:
    """The dtype the model's config.json names (`dtype`, or `torch_dtype` before transformers 4.56);
    float32 when it names none (loading in float32 rewrites the in-memory config, so the file is read)."""
    import torch

    data = json.loads((source / "config.json").read_text())
    name = data.get("dtype") or data.get("torch_dtype") or "float32"
    dtype = getattr(torch, str(name).replace("torch.", ""), None)
    return dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else torch.float32


def policy_dtype(run: Path) -> Any:
    """The dtype an export of `run` writes (its model's own); float32 when the run folder no longer
    tells (float32 holds any dtype exactly, and the export casts it down)."""
    import torch

    try:
        model_path = json.loads((run / "config.json").read_text())["model"]["path"]
        return own_dtype(source_model_dir(run, str(model_path)))
    except (OSError, ValueError, KeyError, TypeError, UserError):
        return torch.float32


SNAPSHOT_ALIASES = "aliases.json"  # a snapshot's tied weights: name -> the name whose tensor it shares


def _snapshot_parts(meta: dict[str, Any], head: str) -> list[list[str]]:
    """The policy's names in `meta` (a DCP checkpoint's) in parts of at most SNAPSHOT_PART_BYTES of
    fp32, ordered by shape so that tied weights (the same shape, the same values) come in a row."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    names = sorted((k[len(head):] for k, m in meta.items() if k.startswith(head) and isinstance(m, TensorStorageMetadata)),
                   key=lambda n: (tuple(meta[head + n].size), n))  # fmt: skip
    parts: list[list[str]] = [[]]
    size = 0
    for name in names:
        n = meta[head + name].size.numel() * 4
        if parts[-1] and size + n > SNAPSHOT_PART_BYTES:
            parts.append([])
            size = 0
        parts[-1].append(name)
        size += n
    return parts if names else []


def write_policy_snapshot(dcp_dir: Path, dest: Path, dtype: Any) -> None:
    """The policy's weights out of a trainer checkpoint folder (`TRAINER_DCP`, written by any worker
    count), cast to `dtype`, into `dest` as safetensors files keyed by the Hugging Face names; read
    SNAPSHOT_PART_BYTES at a time, tied weights stored once (SNAPSHOT_ALIASES), renamed into place when whole."""
    import torch.distributed.checkpoint as dcp

    head = "model." + POLICY_PREFIX  # DCP flattens {"model": {POLICY_PREFIX + name: ...}} to this prefix
    meta = dcp.FileSystemReader(str(dcp_dir)).read_metadata().state_dict_metadata
    parts = _snapshot_parts(meta, head)
    if not parts:
        raise UserError(f"{dcp_dir} holds no policy weights (keys {head}*)")
    tmp = dest.with_name(f".tmp_{dest.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        _write_parts(dcp_dir, tmp, meta, head, parts, dtype)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # a half-written snapshot would hold the disk for nothing
        raise
    tmp.rename(dest)


def _write_parts(dcp_dir: Path, tmp: Path, meta: dict[str, Any], head: str, parts: list[list[str]], dtype: Any) -> None:
    """Each part read from the checkpoint, cast and saved; a tensor equal to the one before it is an alias."""
    import torch
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import save_file

    aliases: dict[str, str] = {}
    prev: tuple[str, Any] = ("", None)  # the last tensor read: a tied twin comes right after it
    for i, part in enumerate(parts):
        state = {POLICY_PREFIX + n: torch.empty(meta[head + n].size, dtype=meta[head + n].properties.dtype) for n in part}
        with warnings.catch_warnings():  # DCP warns that it runs without a process group: we mean it
            warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
            dcp.load({"model": state}, checkpoint_id=str(dcp_dir), no_dist=True)
        out = {}
        for n in part:
            t = state[POLICY_PREFIX + n]
            if prev[1] is not None and prev[1].shape == t.shape and torch.equal(prev[1], t):
                aliases[n] = aliases.get(prev[0], prev[0])
            else:  # a LoRA adapter stays fp32, as the trainer holds it and the adapter export writes it
                out[n] = t.to(torch.float32 if any(m in n for m in ADAPTER_MARKS) else dtype).contiguous()
            prev = (n, t)
        save_file(out, str(tmp / f"policy-{i:05d}.safetensors"))
    (tmp / SNAPSHOT_ALIASES).write_text(json.dumps(aliases))


def read_policy_snapshot(folder: Path) -> dict[str, Any]:
    """A snapshot's weights: Hugging Face name -> tensor (in the dtype it was written in; tied names share one)."""
    from safetensors.torch import load_file

    out: dict[str, Any] = {}
    for part in sorted(folder.glob("policy-*.safetensors")):
        out.update(load_file(str(part)))
    aliases = folder / SNAPSHOT_ALIASES
    for name, twin in (json.loads(aliases.read_text()) if aliases.is_file() else {}).items():
        out[name] = out[twin]
    return out


@contextlib.contextmanager
def shared_token(out_dir: str | Path) -> Iterator[tuple[Path, str]]:
    """A file with a random token in `out_dir` while the block runs (removed after)."""
    token = secrets.token_hex(16)
    path = Path(out_dir) / f"{SHARED_CHECK_PREFIX}{token}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(token)
    try:
        yield path, token
    finally:
        path.unlink(missing_ok=True)


def reads_token(path: str | Path, token: str) -> bool:
    """Whether this process reads `token` at `path` (run on each worker's node)."""
    try:
        return Path(path).read_text() == token
    except OSError:
        return False


def require_shared(out_dir: str | Path, views: list[dict[str, Any]]) -> None:
    """A UserError naming the first worker (`{"node_ip", "seen"}`) that did not read the token."""
    for view in views:
        if not view["seen"]:
            raise UserError(
                f"out_dir {out_dir} is not shared with the trainer worker on node {view['node_ip']}: "
                "put out_dir on storage every node mounts (NFS, a cluster filesystem), since the "
                "coordinator and every trainer worker write the checkpoints into it"
            )
