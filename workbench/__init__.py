"""workbench: predictable RL on LLMs from a notebook.

Science (`workbench.scaling`, `workbench.rl`) imports neither Ray nor notebooks; the engine
(`workbench.engine`) runs on Ray; `workbench.Session` is the notebook face (live-run control); `workbench.RunView` is a read-only
view of a run folder (curve, fit, forecast, chart).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

# Lazy, so `import workbench.scaling` stays light (no torch, no Ray): name -> the module that defines it.
_LAZY = {"Session": "workbench.session", "RunView": "workbench.runs.view"}
__all__ = list(_LAZY)
if TYPE_CHECKING:  # for type checkers and the API reference; at run time __getattr__ loads them
    from workbench.runs.view import RunView
    from workbench.session import Session


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(name)


def __dir__() -> list[str]:
    # the lazy names too, so `workbench.<TAB>` and dir(workbench) offer Session and RunView
    return sorted(set(globals()) | set(_LAZY))
