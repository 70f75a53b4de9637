"""A Hugging Face hub cache seeded offline, in the hub's own layout, and the environment that points at it.

    offline_hub(monkeypatch, tmp_path / "hf")          # HF_HOME there, HF_HUB_OFFLINE=1 (env and the
                                                       # huggingface_hub / datasets constants read at import)
    snap = seed_model(tmp_path / "hf", "Org/tiny", model_dir)   # models--Org--tiny/{blobs,refs/main,snapshots/<sha>}

`seed_model` writes what `hf download` leaves: each file once under blobs/ (named by its sha256),
the snapshot folder of a commit holding relative symlinks to them, and refs/<revision> naming
that commit. The commit sha is made from the files (a stable fake of the hub's commit id).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path


def offline_hub(monkeypatch, home: Path) -> Path:
    """Point huggingface_hub and datasets at `home` (HF_HOME) with HF_HUB_OFFLINE=1; returns the hub cache."""
    import datasets.config
    from huggingface_hub import constants

    cache = Path(home) / "hub"
    cache.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    # both libraries read these once, at import: a test process imported them long before
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", Path(home) / "datasets")
    return cache


def seed_model(home: Path, repo_id: str, folder: Path, *, revision: str = "main", salt: str = "") -> Path:
    """Copy `folder`'s files into the hub cache under `home` as `repo_id` at a commit named by
    refs/<revision>; returns the snapshot folder (its name is the commit sha)."""
    files = sorted(p for p in Path(folder).rglob("*") if p.is_file())
    digest = hashlib.sha1(salt.encode())
    for p in files:
        digest.update(p.relative_to(folder).as_posix().encode() + p.read_bytes())
    commit = digest.hexdigest()
    repo = Path(home) / "hub" / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / commit
    for p in files:
        blob = repo / "blobs" / hashlib.sha256(p.read_bytes()).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        if not blob.exists():
            shutil.copyfile(p, blob)
        link = snap / p.relative_to(folder)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / revision).write_text(commit)
    return snap
