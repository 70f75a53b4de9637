"""How an error inside a Ray actor reaches the user: as that error, in one line; the noise and the
full traceback stay in the run folder.

    cls = ray.remote(held_errors(Generator, out_dir))   # every actor class the engine starts goes through this
    line = describe_error(e)                   # one line for any error, Ray's wrappers taken off
    err = user_error(e)                        # the UserError / RunFailed inside Ray's wrappers, or None
    raise RunFailed("...")                     # the run stopped on an error it cannot recover from
    record_failure(out_dir, e)                 # <out_dir>/error.log: the full traceback, appended
    show_one_line_in_ipython((UserError, RunFailed))   # a notebook cell shows these as one line

Constructor errors are held. An actor whose `__init__` raises dies, and Ray 2.60's worker aborts
on its way out (`*** SIGABRT received ***`, a C++ stack, "Fatal Python error: Aborted", the list
of ~190 extension modules), while the driver gets an `ActorDiedError` whose text merely embeds
the error. `held_errors(cls)` is `cls` (same name: `ray::Generator` in `ps`) whose constructor
keeps the exception instead, and whose every public method raises it: the actor lives, its first
call (a `ping`, `info`, ...) raises `RayTaskError(UserError)`, which is an instance of that
UserError, and the caller kills the actor as it does for any failed start.

Actor output goes to the run folder (`out_dir`). Inside a Ray worker the held constructor first points the
process's stdout and stderr (file descriptors 1 and 2, so C-level crash dumps and child processes
such as vLLM's engine core too) at `<out_dir>/logs/<role>.log` (Generator-0, Evaluator, Trainer-0,
Coordinator; appended across restarts). With `workbench run`'s `log_to_driver` Ray would
otherwise copy every line of it onto the user's terminal; a notebook's cluster drops it.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Optional

from workbench.errors import UserError

ERROR_LOG = "error.log"  # in the run folder: the full traceback of what stopped the run
LOG_DIR = "logs"  # in the run folder: each actor's stdout and stderr


def held_errors(cls: type, out_dir: Optional[str | Path] = None) -> type:
    """`cls` with its constructor's exception held and raised by every public method (see the
    module docstring); inside a Ray actor its output goes to the run folder's logs first (`out_dir`;
    None: Ray's own logs)."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if out_dir is not None:
            redirect_output(Path(out_dir) / LOG_DIR, cls.__name__)
        try:
            cls.__init__(self, *args, **kwargs)
        except Exception as e:  # noqa: BLE001 - held, raised by the first call (see the docstring)
            self.__dict__["_held_error"] = e

    ns: dict[str, Any] = {"__init__": __init__, "__module__": cls.__module__, "__qualname__": cls.__qualname__,
                          "__doc__": cls.__doc__}  # fmt: skip
    for name, fn in inspect.getmembers(cls, inspect.isfunction):
        if getattr(fn, ANSWERS_WHEN_BROKEN, False):
            continue
        if not name.startswith("_") and not isinstance(inspect.getattr_static(cls, name), (staticmethod, classmethod)):
            ns[name] = _raising_held(fn)
    return type(cls.__name__, (cls,), ns)


ANSWERS_WHEN_BROKEN = "_answers_when_broken"


def answers_when_broken(fn: Any) -> Any:
    """Mark a method that `held_errors` leaves unwrapped: it needs nothing the constructor builds
    and answers even when the constructor failed (the trainer's shared-folder check, whose clear
    "not shared" message must win over a missing model under that folder)."""
    setattr(fn, ANSWERS_WHEN_BROKEN, True)
    return fn


def _raising_held(fn: Any) -> Any:
    @functools.wraps(fn)  # keeps Ray's method options (concurrency groups) set on `fn`
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        held = self.__dict__.get("_held_error")
        if held is not None:
            raise held
        return fn(self, *args, **kwargs)

    return call


def redirect_output(folder: Path, default: str) -> Optional[Path]:
    """Inside a Ray actor: point fd 1 and 2 at `folder/<role>.log` (the role from the actor's Ray
    name, e.g. `run/Generator/0` -> Generator-0); elsewhere (tests, the driver) do nothing."""
    try:
        import ray

        ctx = ray.get_runtime_context() if ray.is_initialized() else None
        if ctx is None or ctx.get_actor_id() is None:
            return None
        name = ctx.get_actor_name() or ""
    except Exception:  # noqa: BLE001 - not inside a Ray worker
        return None
    parts = name.split("/")
    role = "-".join(parts[1:]) if len(parts) > 1 else default
    path = folder / f"{role}.log"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:  # an unwritable run folder fails later with its own message; keep Ray's logs then
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    return path


class RunFailed(RuntimeError):
    """The run stopped on an error it cannot recover from; the message says which."""


def user_error(e: BaseException) -> Optional[BaseException]:
    """The innermost UserError (or RunFailed: a one-line reason too) that `e` is or wraps, else None."""
    found, seen = None, e
    while seen is not None:
        if isinstance(seen, (UserError, RunFailed)):
            found = seen
        seen = getattr(seen, "cause", None)  # RayTaskError keeps the remote exception here
    return found


def describe_error(e: BaseException) -> str:
    """One readable line for an error raised in this process or inside an actor."""
    import ray

    known = user_error(e)
    if known is not None:
        return str(known).strip()
    if isinstance(e, ray.exceptions.RayTaskError):
        cause = e.cause if getattr(e, "cause", None) is not None else e
        return f"{type(cause).__name__}: {_last_line(str(cause))}"
    if isinstance(e, ray.exceptions.RayActorError) and getattr(e, "actor_init_failed", False):
        # an actor not built with held_errors died in its constructor: its error is the text's last line
        return f"an actor failed to start: {_last_line(str(e))}"
    return f"{type(e).__name__}: {e}"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def record_failure(out: Path, e: BaseException) -> Path:
    """Append the full traceback of `e` (a remote one included: Ray puts it in the message) to
    `<out>/error.log`; returns that path."""
    path = Path(out) / ERROR_LOG
    text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    with open(path, "a") as fh:
        fh.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {describe_error(e)}\n{text}\n")
    return path


def show_one_line_in_ipython(types: tuple[type, ...]) -> None:
    """In an IPython kernel, show exceptions of `types` (and Ray's wrappers of them) as their one
    line instead of a traceback; the cell still fails (papermill sees the error). No-op elsewhere."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None or getattr(shell, "_workbench_one_line", False):
        return

    def handler(shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: Any = None) -> list[str]:
        kind, line = type(user_error(value) or value), describe_error(value)
        stb = [f"\x1b[0;31m{kind.__name__}\x1b[0m: {line}"]
        shell._showtraceback(kind, line, stb)  # the kernel's error output: ename, evalue (sweeps record them)
        return stb

    shell.set_custom_exc(tuple(types), handler)
    shell._workbench_one_line = True
