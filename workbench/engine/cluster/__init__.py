"""workbench.engine.cluster: the one owner of how a Ray cluster is found, started and stopped.

- `bootstrap`: `connect_for_run(cfg)` (`workbench run`: Ray local cluster of the driver),
  `connect_for_session(cfg)` (Session: the recorded cluster that outlives the kernel),
  `connect(...)`, `required_resources`, `cluster_cpus` (resources.num_cpus honoured everywhere).
- `local`: the recorded `ray start --head` cluster: `start`, `stop`, `hold`/`release`,
  `live_runs`, `cluster_pids`, `pids_with_env`, `terminate`, `started_addresses`.
- `common`: `NAMESPACE`, `free_port`, `kill_actors`, token authentication.
- `cluster_command`: `workbench cluster status|stop`.

    from workbench.engine import cluster
    address = cluster.connect_for_session(cfg)
"""

from workbench.engine.cluster.bootstrap import (
    cluster_cpus,
    connect,
    connect_for_run,
    connect_for_session,
    required_resources,
)
from workbench.engine.cluster.common import NAMESPACE, free_port, kill_actors, token_available, use_token_auth
from workbench.engine.cluster.local import (
    GOING,
    STATE_DIR_ENV,
    cluster_pids,
    hold,
    live_runs,
    pids_with_env,
    recorded_address,
    release,
    start,
    started_addresses,
    state_dir,
    stop,
    terminate,
)

__all__ = [
    "GOING", "STATE_DIR_ENV", "NAMESPACE", "cluster_cpus", "cluster_pids", "connect", "connect_for_run", "connect_for_session",
    "free_port", "hold", "kill_actors", "live_runs", "pids_with_env", "recorded_address", "release", "required_resources", "start",
    "started_addresses", "state_dir", "stop", "terminate", "token_available", "use_token_auth",
]  # fmt: skip
