"""The module paths workbench.scaling had before fit/, forecast/ and decide/, kept importable.

    from workbench.scaling.sigmoid import fit_sigmoid      # still works: workbench.scaling.fit.sigmoid
    import workbench.scaling.engine                        # the module workbench.scaling.fit.numerics itself

`workbench.scaling.forecast` was the blend's module and is now the forecast/ package, whose door
re-exports the blend's public names. An old path gives the moved module itself (the same object, so patching one patches the other).
Targets that workbench/scaling/__init__ has already loaded are aliased in sys.modules at once; the
rest (early_stop, ladder, scoreboard, cli) are loaded on first import through a meta-path finder.
Aliasing at once matters for `backtest` and `compare`: they are also functions the package exports,
and a late submodule import would overwrite the package's attribute with the module.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from types import ModuleType

PACKAGE = "workbench.scaling"
# old module name (under workbench.scaling) -> its module now
MOVED: dict[str, str] = {
    "engine": "fit.numerics",
    "sigmoid": "fit.sigmoid",
    "result": "fit.result",
    "prior": "fit.prior",
    "paper": "fit.paper",
    "stretched": "fit.stretched",
    "powerlaw": "fit.powerlaw",
    "far": "forecast.far",
    "families": "forecast.families",
    "backtest": "forecast.backtest",
    "scoreboard": "forecast.scoreboard",
    "predict": "forecast.config_curve",
    "ladder": "forecast.ladder",
    "decision": "decide.gain",
    "compare": "decide.compare",
    "early_stop": "decide.early_stop",
    "ceiling": "decide.ceiling",
    "cli": "fit_command",
}


def target(old: str) -> str:
    """The full module name an old short name (`sigmoid`) now lives at."""
    return f"{PACKAGE}.{MOVED[old]}"


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: object = None, target_: object = None) -> importlib.machinery.ModuleSpec | None:
        old = fullname.removeprefix(PACKAGE + ".")
        if fullname.startswith(PACKAGE + ".") and old in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # a placeholder; exec_module swaps the real module in

    def exec_module(self, module: ModuleType) -> None:
        # the import system returns whatever sys.modules holds under the name after exec_module
        sys.modules[module.__name__] = importlib.import_module(target(module.__name__.removeprefix(PACKAGE + ".")))


def install() -> None:
    """Alias the old paths whose modules are loaded; serve the others through the finder (once)."""
    for old in MOVED:
        new = sys.modules.get(target(old))
        if new is not None:
            sys.modules.setdefault(f"{PACKAGE}.{old}", new)
    if not any(isinstance(f, _OldPaths) for f in sys.meta_path):
        sys.meta_path.append(_OldPaths())
