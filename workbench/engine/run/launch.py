"""Start and finish runs from a driver: the engine's entry points (re-exported by workbench.engine).

    cfg = load_run_config("configs/quickstart.yaml")
    handle = launch(cfg)                  # Ray local cluster unless resources.ray_address is set
    handle.start(max_minutes=None)        # returns at once; the run goes on in Ray actors
    summary = handle.wait()               # raises RunFailed with a one-line reason on failure
    summary = run_to_end(cfg, resume=False)   # all of the above in one blocking call (benchmarks, tests)
    summary = wait_with_progress(handle, cfg.train.max_steps)   # `workbench run`'s progress bar

`launch` resolves the config's paths, runs the preflight checks (preflight.py), gets a Ray
cluster (engine.cluster: connected to, or started for this driver), checks it can hold the run
and starts the Coordinator actor (handle.py). `launch(..., detached=True)` names and detaches
that actor, so a notebook kernel restart leaves the run going and `attach(name)` finds it again.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Optional

import ray

from workbench.config import RunConfig
from workbench.engine.cluster import connect_for_run
from workbench.engine.run.handle import RunHandle, start_coordinator
from workbench.engine.run.preflight import absolute_paths, check_resources, preflight
from workbench.errors import UserError


def launch(cfg: RunConfig, *, detached: bool = False, resume: bool = True, build_model: bool = True,
           checked: bool = False) -> RunHandle:  # fmt: skip
    """The run's Coordinator actor, created and answering (not started: `handle.start()`).
    `checked`: the caller already ran `preflight` on this config (`workbench run` does, before MLflow)."""
    cfg = absolute_paths(cfg)
    if not checked:
        preflight(cfg, build_model=build_model)
    started = connect_for_run(cfg)
    try:
        check_resources(cfg)
    except UserError:
        if started:  # a cluster this call started for a run it refuses: leave nothing behind
            ray.shutdown()
        raise
    return start_coordinator(cfg, detached=detached, resume=resume)


def run_to_end(cfg: RunConfig, *, resume: bool = True, timeout: Optional[float] = None) -> dict[str, Any]:
    """Launch, run to the end and release the actors; returns the run's summary."""
    handle = launch(cfg, resume=resume)
    try:
        handle.start()
        return handle.wait(timeout=timeout)
    finally:
        handle.kill()


def wait_with_progress(handle: RunHandle, max_steps: int, *, poll: float = 0.5, quiet: bool = False) -> dict[str, Any]:
    """Block until the run ends, showing a progress bar of steps, pass rate and compute."""
    from tqdm.auto import tqdm

    bar = None if quiet else tqdm(
        total=max_steps, desc=handle.name, unit="step", dynamic_ncols=True, mininterval=0.5 if sys.stderr.isatty() else 10
    )
    seen, last_val, shown, told = 0, None, 0, 0

    def show(val: Optional[float], counts: dict[str, Any]) -> None:
        bar.set_postfix(refresh=False, val=f"{val:.3f}" if val is not None else "-",
                        dev_h=f"{counts.get('compute/device_hours', 0.0):.4f}", flops=f"{counts.get('compute/flops', 0.0):.2e}")

    def tell(events: list[str]) -> int:  # generator restarts, curriculum and not-learning warnings
        for event in events[told:]:
            (tqdm.write if bar is not None else print)(f"{handle.name}: {event}", file=sys.stderr)
        return max(told, len(events))

    try:
        while not handle.done():
            rows = handle.metrics(seen)
            seen += len(rows)
            for r in rows:
                if "val/pass_rate" in r:
                    last_val = r["val/pass_rate"]
            st = handle.status()
            told = tell(st.get("events", []))
            if bar is not None:
                if st["step"] > shown:
                    bar.update(st["step"] - shown)
                    shown = st["step"]
                show(last_val, st)
            time.sleep(poll)
        summary = handle.wait()
        told = tell(summary.get("events", []))  # those of the last poll interval
        if bar is not None:  # the last evaluation lands as the run ends: show it, not the one before
            if summary.get("val_pass_rate_last") is not None:
                show(summary["val_pass_rate_last"], summary)
            bar.update(max(0, summary["steps"] - shown))
        return summary
    finally:
        if bar is not None:
            bar.close()
