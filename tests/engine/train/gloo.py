"""Trainer workers as spawned processes joined by gloo: FSDP2 on CPU without Ray.

    results = run_ranks(job, 2, cfg)      # job(rank, world_size, ranks, *args) in each process
    trainer = ranks.trainer(cfg)          # inside a job: a Trainer of this rank, connected

`job` must be a module-level function (spawn pickles it by name). Each rank's return value
comes back pickled by value; an exception in any rank fails the call with that rank's
traceback. Every `ranks.trainer(...)` call forms a new process group (the previous one is
destroyed), with rank 0's `Trainer.rendezvous()` port handed to the others, as the Ray group
does it.
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import queue
import traceback
from typing import Any, Callable

TIMEOUT_S = 600.0


class Ranks:
    """What a job gets besides its rank: a way to build connected trainers."""

    def __init__(self, rank: int, world_size: int, ports: Any):
        self.rank, self.world_size, self._ports = rank, world_size, ports

    def trainer(self, cfg: Any) -> Any:
        from workbench.engine.train import fsdp
        from workbench.engine.train.trainer import Trainer
        from workbench.engine.run.actors import trainer_parts

        fsdp.destroy()
        tr = Trainer(**trainer_parts(cfg), rank=self.rank, world_size=self.world_size)
        if self.rank == 0:
            address, port = tr.rendezvous()
            for _ in range(self.world_size - 1):
                self._ports.put((address, port))
        else:
            address, port = self._ports.get(timeout=TIMEOUT_S)
        tr.connect(address, port, timeout_s=TIMEOUT_S)
        return tr


def _entry(rank: int, world_size: int, job: Callable, args: tuple, ports: Any, results: Any) -> None:
    try:
        out = job(rank, world_size, Ranks(rank, world_size, ports), *args)
        results.put((rank, pickle.dumps(out), None))
    except BaseException:  # noqa: BLE001 - sent back to the test
        results.put((rank, None, traceback.format_exc()))
    finally:
        from workbench.engine.train import fsdp

        fsdp.destroy()


def run_ranks(job: Callable, world_size: int, *args: Any) -> list[Any]:
    """Run `job` in `world_size` spawned processes; their return values, by rank."""
    ctx = mp.get_context("spawn")
    ports, results = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=_entry, args=(r, world_size, job, args, ports, results), daemon=True) for r in range(world_size)]
    for p in procs:
        p.start()
    out: dict[int, Any] = {}
    try:
        for _ in range(world_size):
            try:
                rank, payload, error = results.get(timeout=TIMEOUT_S)
            except queue.Empty:
                raise AssertionError(f"gloo workers: no result within {TIMEOUT_S:g} s") from None
            if error is not None:
                raise AssertionError(f"rank {rank} failed:\n{error}")
            out[rank] = pickle.loads(payload)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    return [out[r] for r in range(world_size)]
