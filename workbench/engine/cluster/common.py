"""Ray facts every part of the engine shares: the namespace, a free port, token authentication,
killing actors.

    NAMESPACE                  # where runs' named actors live ("run:<name>", "<run>/Trainer/0", ...)
    free_port()                # a TCP port free on every interface (Ray heads, torch.distributed)
    use_token_auth()           # send ~/.ray/auth_token from this driver
    kill_actors([a, b])        # no restart; actors already gone are skipped
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any, Iterable

NAMESPACE = "workbench"


def free_port() -> int:
    """A TCP port nobody listens on now, free on every interface (Ray and torch.distributed bind
    the node's address, not loopback)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def kill_actors(actors: Iterable[Any]) -> None:
    """Kill each actor for good; one that is already gone (or None) is skipped."""
    import ray

    for actor in actors:
        if actor is None:
            continue
        try:
            ray.kill(actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass


def use_token_auth() -> None:
    """Send the cluster token (~/.ray/auth_token) from this driver, even if Ray is imported already."""
    os.environ["RAY_AUTH_MODE"] = "token"
    try:  # Ray reads its config once at import; this refreshes it (Ray >= 2.52)
        from ray._private.authentication.authentication_token_setup import _enable_token_auth

        _enable_token_auth()
    except ImportError:  # older Ray: no token authentication to enable
        pass


def token_available() -> bool:
    """True when this driver has a Ray auth token: $RAY_AUTH_TOKEN, $RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token."""
    if os.environ.get("RAY_AUTH_TOKEN", "").strip():
        return True
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    path = Path(path).expanduser() if path else Path.home() / ".ray" / "auth_token"
    try:
        return path.is_file() and bool(path.read_text().strip())
    except OSError:
        return False


def auth_failure(error: BaseException) -> bool:
    """Whether a failed ray.init was refused for authentication (Ray wraps the cause in a ConnectionError)."""
    import ray

    seen: BaseException | None = error
    while seen is not None:
        text = str(seen).lower()
        if isinstance(seen, ray.exceptions.AuthenticationError) or "unauthenticated" in text or "authentication" in text:
            return True
        seen = seen.__cause__ or seen.__context__
    return False
