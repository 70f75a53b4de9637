"""`workbench cluster status|stop`: the runs on the recorded local cluster, or shut it down."""

from __future__ import annotations

from workbench.engine.cluster.bootstrap import connect
from workbench.engine.cluster.common import use_token_auth
from workbench.engine.cluster.local import GOING, live_runs, reachable, recorded_address, state_dir, stop
from workbench.errors import UserError


def add_parser(subparsers, name: str):
    p = subparsers.add_parser(name, help="the local Ray cluster of interactive sessions: list its runs, or stop it",
                              description="status: the runs on the recorded local cluster; stop: shut that cluster down.",
                              epilog="examples: workbench cluster status; workbench cluster stop")
    sub = p.add_subparsers(dest="cluster_command", metavar="ACTION")
    sub.add_parser("status", help="list the runs on the cluster (name, status, step)",
                   description="List the runs on the recorded local Ray cluster: name, status, step.")
    st = sub.add_parser("stop", help="shut the cluster down (refused while a run is going, unless --force)",
                        description="Shut the recorded local Ray cluster down (refused while a run is going, unless --force).")
    st.add_argument("--force", action="store_true", help="stop it even with runs going (they stop at once, mid-step)")
    return p


def run(args) -> int:
    action = getattr(args, "cluster_command", None)
    if action not in ("status", "stop"):
        raise UserError("say what to do: `workbench cluster status` or `workbench cluster stop`")
    if action == "status":
        from workbench.runs.liveness import tell_dead_runs

        tell_dead_runs()  # runs whose driver died stay RUNNING in MLflow until someone looks
    address = recorded_address()
    if address is None or not reachable(address):
        print(f"no workbench Ray cluster is running (none recorded in {state_dir() / 'ray_address'} is reachable)")
        if address is not None:
            (state_dir() / "ray_address").unlink(missing_ok=True)
        return 0
    use_token_auth()  # our clusters require the token
    connect(address=address, start_if_missing=False)
    runs = live_runs()
    if action == "status":
        print(f"Ray cluster {address}: {len(runs)} run(s)")
        for r in runs:
            print(f"  {r['name']}  {r['status']}  step {r['step']}/{r['max_steps']}")
        return 0
    going = [r["name"] for r in runs if r["status"] in GOING]
    if going and not args.force:
        raise UserError(f"runs still going on {address}: {going}; stop them first (Session.attach(name).stop()) or use --force")
    import ray

    ray.shutdown()
    stop(address)
    print(f"stopped the Ray cluster at {address}" + (f" (runs stopped: {going})" if going else ""))
    return 0
