"""The trainer as a group of Ray actors: one `Trainer` per device, sharded with FSDP2 when N > 1.

`resources.trainer_workers: N` (default 1). N = 1 is one actor, no process group, no placement
group: the same fast path as before. N > 1: a Ray placement group (`resources.trainer_placement`,
PACK by default; SPREAD to put the workers on different nodes) holds one bundle per worker
(`trainer_cpus`, `trainer_gpus`); rank 0 picks the rendezvous address and port; every worker
joins the torch.distributed group (gloo on CPU, NCCL on GPU) and shards the model.

Each step the whole batch goes to every worker (one object in Ray's store); each prepares it
identically (filter, advantages, aggregation weights over the whole batch) and trains its share
of the rows; the gradients are summed over the ranks. Rank 0 returns the StepResult (with what each
sequence was trained with, `StepResult.trained`: the kept samples' advantages) and the gathered
full weights. Each worker is a `Trainer(**parts, rank=r, world_size=N)`: `parts` are its config
parts, chosen once by the driver (run/actors.trainer_parts). With `shared_dir` (the run folder),
every start first checks that each worker reads the file the coordinator writes there
(runs/checkpoint.require_shared): checkpoints are written into it from both sides. A worker that
dies raises `TrainerDied` from any call here; the coordinator then `restart()`s the group and
reloads the last checkpoint.

    group = TrainerGroup(trainer_parts(cfg), cfg.resources, name=cfg.name, shared_dir=cfg.output_dir())
    call = group.train(packed_groups, step); ray.get(call.result).version
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import ray

from workbench.config import ResourcesConfig
from workbench.engine.cluster.common import kill_actors
from workbench.engine.failures import held_errors
from workbench.engine.train.trainer import Trainer
from workbench.errors import UserError
from workbench.runs.checkpoint import require_shared, shared_token

PLACEMENT_TIMEOUT_S = 120.0
PEER_DEATH_WAIT_S = 30.0  # how long a rank's failure waits for Ray to report a dead peer


class TrainerDied(RuntimeError):
    """A trainer worker died (killed, out of memory, its node gone); the message says which."""


@dataclass
class TrainCall:
    """One submitted train step: refs to rank 0's `StepResult` and weights, and to every rank's
    result (to watch: a dead rank shows there first)."""

    result: Any
    weights: Any
    all_results: list


def get_all(refs: list) -> list:
    """ray.get of every ref, raising as soon as ANY fails (a dead rank leaves the others blocked
    in a collective: waiting for them in order would hang)."""
    pending = list(refs)
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            ray.get(ready)
        return ray.get(list(refs))
    except ray.exceptions.RayError as e:
        raise as_group_failure(e, refs) from None


def as_group_failure(error: Exception, refs: list) -> Exception:
    """What a failed rank call means for the group. A dead rank is `TrainerDied`. A survivor often
    fails first: its collective sees the peer's socket close ("Connection closed by peer") before
    Ray reports the dead actor. So on any other error, the group's other calls (`refs`) get up to
    PEER_DEATH_WAIT_S to show a death; if none does, the error is the rank's own and is returned
    as it was."""
    if isinstance(error, ray.exceptions.RayActorError):
        return TrainerDied(f"a trainer worker died ({type(error).__name__})")
    pending, deadline = list(refs), time.monotonic() + PEER_DEATH_WAIT_S
    while pending and (left := deadline - time.monotonic()) > 0:
        ready, pending = ray.wait(pending, num_returns=1, timeout=left)
        for ref in ready:
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError as e:
                return TrainerDied(f"a trainer worker died ({type(e).__name__}); a peer's collective failed with it")
            except ray.exceptions.RayError:
                pass  # another survivor's view of the same failure, or the same own error
    return error


class TrainerGroup:
    """`parts`: each worker's `Trainer` keywords; `resources`: the workers' count, CPU/GPU share and
    placement (trainer_*); `name`: the run's (the actors' Ray names); `shared_dir`: the run folder,
    which every worker must read (checked at each start) and where it writes its output (logs/)."""

    def __init__(self, parts: dict[str, Any], resources: ResourcesConfig, *, name: str, shared_dir: Optional[str | Path] = None):
        self.parts, self.resources, self.name = parts, resources, name
        self.shared_dir = shared_dir
        self.num_workers = resources.trainer_workers
        self.actors: list = []
        self.placement: Any = None
        self.info: dict[str, Any] = {}  # rank 0's
        self.infos: list[dict[str, Any]] = []  # every rank's (device, node)
        self.start()

    # -- lifecycle -----------------------------------------------------------------------
    def actor_name(self, rank: int) -> str:
        return f"{self.name}/Trainer/{rank}"

    def start(self) -> None:
        r = self.resources
        # a constructor error comes back from the first call; output to the run folder's logs/ (failures.py)
        cls = ray.remote(held_errors(Trainer, self.shared_dir))
        opts: dict[str, Any] = dict(num_cpus=r.trainer_cpus, num_gpus=r.trainer_gpus, max_restarts=0)
        try:
            if self.num_workers == 1:
                self.actors = [cls.options(**opts, name=self.actor_name(0)).remote(**self.parts)]
            else:
                self.placement = self._placement_group()
                from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

                self.actors = [
                    cls.options(
                        **opts,
                        name=self.actor_name(rank),
                        scheduling_strategy=PlacementGroupSchedulingStrategy(self.placement, placement_group_bundle_index=rank),
                    ).remote(**self.parts, rank=rank, world_size=self.num_workers)
                    for rank in range(self.num_workers)
                ]
            self._check_shared()  # before rank 0 sends the weights: a wrong setup fails in seconds
            if self.num_workers > 1:
                address, port = ray.get(self.actors[0].rendezvous.remote())
                get_all([a.connect.remote(address, port) for a in self.actors])
            self.infos = get_all([a.info.remote() for a in self.actors])
            self.info = self.infos[0]
        except Exception:
            self.kill()
            raise

    def _check_shared(self) -> None:
        if self.shared_dir is None:
            return
        with shared_token(self.shared_dir) as (path, token):
            views = get_all([a.sees.remote(str(path), token) for a in self.actors])
        require_shared(self.shared_dir, views)

    def _placement_group(self) -> Any:
        from ray.util.placement_group import placement_group

        r = self.resources
        bundle = {"CPU": r.trainer_cpus, **({"GPU": r.trainer_gpus} if r.trainer_gpus > 0 else {})}
        placement = placement_group([dict(bundle) for _ in range(self.num_workers)], strategy=r.trainer_placement.upper())
        ready, _ = ray.wait([placement.ready()], timeout=PLACEMENT_TIMEOUT_S)
        if not ready:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(placement)
            raise UserError(
                f"cannot place {self.num_workers} trainer workers of {bundle} ({r.trainer_placement}) "
                f"in the Ray cluster within {PLACEMENT_TIMEOUT_S:g} s: lower resources.trainer_workers "
                "or add nodes"
            )
        return placement

    def kill(self) -> None:
        kill_actors(self.actors)
        if self.placement is not None:
            from ray.util.placement_group import remove_placement_group

            try:
                remove_placement_group(self.placement)
            except Exception:  # noqa: BLE001 - already removed
                pass
        self.actors, self.placement = [], None

    def restart(self) -> None:
        """Kill every worker (the survivors are stuck in collectives) and start a fresh group."""
        self.kill()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(self._name_taken(r) for r in range(self.num_workers)):
            time.sleep(0.1)  # a killed actor's name is released asynchronously
        self.start()

    def _name_taken(self, rank: int) -> bool:
        try:
            ray.get_actor(self.actor_name(rank))
            return True
        except ValueError:
            return False

    # -- calls ---------------------------------------------------------------------------
    def train(self, groups: Any, step: int) -> TrainCall:
        ref = ray.put(groups) if self.num_workers > 1 else groups  # one copy in the store for all ranks
        pairs = [a.train_step.options(num_returns=2).remote(ref, step) for a in self.actors]
        return TrainCall(result=pairs[0][0], weights=pairs[0][1], all_results=[p[0] for p in pairs])

    def get_weights(self) -> Any:
        """An ObjectRef of the full weights (rank 0; every rank takes part in the gather)."""
        refs = [a.get_weights.remote() for a in self.actors]
        return refs[0]

    def save(self, path: str) -> None:
        get_all([a.save.remote(str(path)) for a in self.actors])

    def load(self, path: Optional[str]) -> int:
        return int(get_all([a.load.remote(str(path)) for a in self.actors])[0])

    @property
    def num_nodes(self) -> int:
        return len({i.get("node_id") for i in self.infos})

    def pids(self) -> list[int]:
        return [int(p) for p in get_all([a.pid.remote() for a in self.actors])]
