"""Hugging Face hub model ids: resolved once, on the driver, to a local snapshot folder and its commit.

    snap = resolve_model("Qwen/Qwen2.5-0.5B-Instruct", revision=None)   # HubSnapshot
    snap.folder    # ~/.cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B-Instruct/snapshots/<sha>
    snap.commit    # the 40-hex commit sha that `revision` (default: main) pointed at
    resolve_model("Qwen/Qwen2.5-7B-Instruct", weights=False)   # config.json and the tokenizer only (workbench plan)
    is_hub_id("Qwen/Qwen2.5-0.5B-Instruct")   # True unless a local folder of that name exists

Everything goes through `huggingface_hub` (`snapshot_download`), so its cache and environment
variables are the user's own: `HF_HOME` / `HF_HUB_CACHE` (where), `HF_HUB_OFFLINE=1` (cache only)
and `HF_TOKEN` (gated and private repos). Only what a causal LM needs is downloaded: other
frameworks' weights (`*.pth`, `original/`, ONNX, ...) are skipped, and `*.bin` too when the repo has
safetensors. Every failure is one `UserError` line naming the id and what to do.

The multi-node rule: the driver resolves the id once (preflight.absolute_paths) and every actor
gets the same snapshot folder (`model.path`) and commit (`model.revision`). A node where that
folder is absent (a node-local HF cache) resolves the very same commit through its own cache
(`node_snapshot`, called by hf_dir.check_model_dir), never a newer revision of the branch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from workbench.config.model import snapshot_id  # noqa: F401  (hub caches' layout; the run record reads it too)
from workbench.errors import UserError

# Files of other frameworks and formats that a repo may carry beside the transformers weights.
IGNORED = ["original/*", "*.pth", "*.pt", "*.msgpack", "*.h5", "*.onnx", "onnx/*", "*.ot", "*.gguf", "*.tflite",
           "*.mlmodel", "coreml/*", "openvino/*"]  # fmt: skip
COMMIT = re.compile(r"[0-9a-f]{40}")
# What `workbench plan` reads of a hub model: config.json and the tokenizer (prompt lengths), never the weights.
SMALL_FILES = ["*.json", "*.txt", "*.model", "*.jinja"]


@dataclass(frozen=True)
class HubSnapshot:
    """A hub model resolved on this machine: `folder` holds `repo_id` at `commit` (what `revision` named)."""

    repo_id: str
    revision: str
    commit: str
    folder: Path


def is_hub_id(path: str) -> bool:
    """True when `path` names a hub repo ("ORG/NAME" or "NAME") rather than a local folder: no
    folder of that name exists here, it does not start like a path (/ . ~) and the hub accepts it."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if path.startswith(("/", ".", "~", "builtin:")) or path.count("/") > 1 or Path(path).expanduser().exists():
        return False
    try:
        validate_repo_id(path)
    except HFValidationError:
        return False
    return True


def _ignored(files: Optional[list[str]]) -> list[str]:
    """The patterns to skip: IGNORED, and `*.bin` when the repo has safetensors weights."""
    has_safetensors = files is not None and any(f.endswith(".safetensors") for f in files)
    return IGNORED + (["*.bin"] if has_safetensors else [])


def _repo_files(repo_id: str, revision: str) -> Optional[list[str]]:
    """The repo's file names at `revision`: from the hub, or offline from the listing a previous
    download cached (None when there is none: then the snapshot folder is taken as it is)."""
    from huggingface_hub import constants, get_cached_repo_tree, snapshot_download
    from huggingface_hub.errors import CachedRepoTreeNotFoundError, DryRunError

    if not constants.is_offline_mode():
        try:
            return [f.filename for f in snapshot_download(repo_id, revision=revision, dry_run=True)]
        except DryRunError:  # the hub cannot be reached: the cache answers below
            pass
    try:
        return [f.path for f in get_cached_repo_tree(repo_id, revision=revision)]
    except CachedRepoTreeNotFoundError:
        return None


def _download(repo_id: str, revision: str, *, small_files_only: bool = False) -> Path:
    """snapshot_download with the module's patterns (with `small_files_only`: the config, tokenizer
    and index files only, no weights); every hub error becomes one UserError line."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, HFValidationError, LocalEntryNotFoundError,
                                        RepositoryNotFoundError, RevisionNotFoundError)  # fmt: skip

    where = f"model.path: {repo_id!r} (revision {revision})"
    try:
        if small_files_only:
            return Path(snapshot_download(repo_id, revision=revision, allow_patterns=SMALL_FILES))
        return Path(snapshot_download(repo_id, revision=revision, ignore_patterns=_ignored(_repo_files(repo_id, revision))))
    except HFValidationError as e:
        raise UserError(f"model.path: {repo_id!r} is neither a local folder nor a valid hub id ({e})") from None
    except LocalEntryNotFoundError:  # offline (or the hub unreachable) and not in the cache, or cached only in part
        offline = "HF_HUB_OFFLINE is set" if constants.is_offline_mode() else "the hub cannot be reached"
        raise UserError(
            f"{where} is no local folder, and not (completely) in the Hugging Face cache {constants.HF_HUB_CACHE} while {offline}: "
            f"download it where there is a network with `hf download {repo_id}"
            f"{'' if revision == 'main' else ' --revision ' + revision}` into the same HF_HOME, or give a local folder"
        ) from None
    except GatedRepoError:
        raise UserError(f"{where} is gated: accept its terms on its hub page, then set HF_TOKEN (or `hf auth login`)") from None
    except RepositoryNotFoundError:
        raise UserError(f"{where}: no such model on the hub, or a private one (set HF_TOKEN); nor is it a local folder") from None
    except RevisionNotFoundError:
        raise UserError(f"model.revision: {revision!r} is no branch, tag or commit of {repo_id!r}") from None
    except (HfHubHTTPError, OSError) as e:
        raise UserError(f"{where}: download failed ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None


def resolve_model(repo_id: str, revision: Optional[str] = None, *, weights: bool = True) -> HubSnapshot:
    """The local snapshot of `repo_id` at `revision` (a branch, tag or commit; None: main),
    downloaded once into the hub cache unless already there; offline, the cache alone answers.
    `weights=False`: only the small files (SMALL_FILES: config.json, the tokenizer), what the
    memory plan needs to know a model's shape."""
    revision = revision or "main"
    folder = _download(repo_id, revision, small_files_only=not weights)
    return HubSnapshot(repo_id=repo_id, revision=revision, commit=folder.name, folder=folder)


def node_snapshot(folder: str | Path) -> Optional[Path]:
    """This node's copy of a snapshot folder the driver resolved and this node lacks: the same repo
    and commit through this node's hub cache (downloaded if online). None: `folder` is no snapshot."""
    ident = snapshot_id(folder)
    if ident is None:
        return None
    return _download(*ident)
