"""Calling environment code with a deadline: a call that hangs is abandoned, never waited on.

    value = call_with_deadline(env.reset, 5.0, "CalculatorEnv.reset", **row)   # EnvHang after 5 s

The call runs in a daemon worker thread; the caller waits `timeout_s` for it. Python cannot kill a
thread, so a call that hangs keeps its thread (and whatever it holds) until it returns or the
process ends: the episode it belonged to is dropped (the engine drops its group and counts it),
and the instance is never used again. A daemon thread does not keep the process alive at exit.
Code that must be stoppable (model-written code) belongs in the sandbox pool, not here.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any, Callable, Optional


class EnvFault(Exception):
    """Environment code failed (raised, hung, or returned the wrong type): the episode is errored.
    The message is one line naming the method."""


class EnvHang(EnvFault):
    """A call did not return within its deadline; it was abandoned."""


def _awaited(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """fn(*args, **kwargs); an `async def` method (TRL allows async tools and get_reward) is run to
    its end on an event loop of its own."""
    value = fn(*args, **kwargs)
    return asyncio.run(value) if inspect.iscoroutine(value) else value


def call_with_deadline(fn: Callable[..., Any], timeout_s: Optional[float], what: str, *args: Any, **kwargs: Any) -> Any:
    """fn(*args, **kwargs) (awaited if it is async), or EnvHang when it has not returned after
    `timeout_s` seconds (None or <= 0: no deadline, called inline). Exceptions from `fn` propagate."""
    if not timeout_s or timeout_s <= 0:
        return _awaited(fn, args, kwargs)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = _awaited(fn, args, kwargs)
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = e

    worker = threading.Thread(target=target, name=f"env:{what}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise EnvHang(f"{what} did not return within {timeout_s:g} s (abandoned; its thread cannot be killed)")
    if "error" in box:
        raise box["error"]
    return box.get("value")
