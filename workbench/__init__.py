"""workbench: predictable RL on LLMs from a notebook.

Science (`workbench.scaling`, `workbench.rl`) imports neither Ray nor notebooks; the engine
(`workbench.engine`) runs on Ray; `workbench.Session` is the notebook face (live-run control); `workbench.RunView` is a read-only
view of a run folder (curve, fit, forecast, chart).
"""

from __future__ import annotations

__version__ = "0.1.0"


def __getattr__(name: str):
    # Lazy, so `import workbench.scaling` stays light (no torch, no Ray).
    if name == "Session":
        from workbench.session import Session

        return Session
    if name == "RunView":
        from workbench.runs.view import RunView

        return RunView
    raise AttributeError(name)
