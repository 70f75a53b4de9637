"""A run that already exists, found for a Session: what `Session.attach` and `Session.resume_from` stand on.

`Session.attach(target)` names a run by its name or its folder; the run is one of three kinds,
and each is followed its own way:

- a live Session run: its named, detached Coordinator actor, through Ray (`RunFeed`: full control);
- a live `workbench run` (started in a terminal): watched from its folder with no Ray connection
  (`FolderFeed`: `stop()` asks its driver to stop; pause and resume are refused);
- an ended run: its folder, read-only (`RunView.open`: curve, fit, chart).

    found = find_for_attach("my-run", tracking=True, x="compute/device_hours")
    found.view, found.feed, found.tracking     # feed None: the run has ended
    cfg = resumable_config("runs/my-run", max_steps=400)   # Session.resume_from's checks

workbench/session.py turns a `Found` into a Session; nothing here holds one.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from workbench.config import RunConfig
from workbench.engine.run.feed import RunFeed
from workbench.errors import UserError
from workbench.runs.folder import attached_config, checkpoint_step, has_checkpoint, run_folder, with_max_steps
from workbench.runs.follow import FolderFeed, FolderRun
from workbench.runs.view import TERMINAL, RunView, folder_config


@dataclass
class Found:
    """A run found for `Session.attach`: its view (rows and state so far) and how to follow it."""

    view: RunView
    feed: Optional[Union[RunFeed, FolderFeed]]
    """Polls the live run into `view`; None: the run has ended (a read-only session)."""
    tracking: bool
    """Whether the session may log to the run's MLflow run (a folder-watched run's driver does that itself)."""


def find_for_attach(target: str | Path, *, tracking: bool, x: str) -> Found:
    """The run `target` (its name or run folder), as the module docstring says; UserError, one line,
    when it names no run. A Session run on a shared cluster may be recorded on another machine: a
    name the registry lacks is looked up as a live actor too."""
    from workbench.engine.run.registry import find_run

    try:
        entry = find_run(target)
    except UserError as missing:
        found = _live_actor(str(target), tracking=tracking, x=x)
        if found is None:
            raise missing from None
        return found
    if entry.detached and (found := _live_actor(entry.name, tracking=tracking, x=x)) is not None:
        return found
    status, _ = entry.status()
    if status in TERMINAL:
        print(f"run '{entry.name}' has ended ({status}): opened read-only from {entry.out_dir}", file=sys.stderr)
        return Found(RunView.open(entry.out_dir, x=x), None, tracking=False)
    view = RunView(attached_config({"out_dir": entry.out_dir, "max_steps": entry.max_steps}, entry.name), x=x)
    run = FolderRun(entry.out_dir, entry.name, max_steps=entry.max_steps, status=entry.status)
    print(f"watching run '{entry.name}' from its folder {entry.out_dir} (its driver runs it; pid {entry.pid}): "
          "read-only, stop() asks it to stop", file=sys.stderr)
    return Found(view, FolderFeed(run, view), tracking=False)  # its driver tracks it in MLflow, not the session


def _live_actor(name: str, *, tracking: bool, x: str) -> Optional[Found]:
    """A live Session run's named, detached actor, through Ray; None when no cluster or no such actor."""
    from workbench.engine import attach, cluster
    from workbench.runs.liveness import tell_dead_runs

    try:
        cluster.hold(cluster.connect(start_if_missing=False))
        handle = attach(name)
    except UserError:
        return None
    tell_dead_runs()  # end the MLflow runs of drivers that died (this one may be among them)
    st = handle.status()
    view = RunView(attached_config(st, name), x=x)
    if st.get("resumed_from") is not None:  # the actor holds only rows since its resume
        view.load_rows(Path(st["out_dir"]) / "metrics.jsonl", until_step=st["resumed_from"])
    view.state = st
    return Found(view, RunFeed(handle, view), tracking=tracking)


def resumable_config(target: str | Path, max_steps: Optional[int]) -> RunConfig:
    """The config of the stopped run `target` (its out_dir, or its name under <project>/runs), which
    `Session.resume_from` continues: UserError, one line, when it has no checkpoint or its last
    checkpoint is already at its step target (`max_steps`, else its config's)."""
    path = run_folder(target)
    if not has_checkpoint(path):
        raise UserError(f"{path} has no checkpoint: nothing to resume from")
    cfg = folder_config(path)
    done = checkpoint_step(path) or 0
    goal = with_max_steps(cfg, max_steps).train.max_steps if max_steps is not None else cfg.train.max_steps
    if goal <= done:  # nothing to train: refuse rather than restart a run that would end at once
        raise UserError(f"run '{cfg.name}' is already at step {done} (its last checkpoint) and its step target is {goal}: "
                        f"pass max_steps > {done} to train it further")
    return cfg
