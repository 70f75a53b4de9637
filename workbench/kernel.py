"""The project's Jupyter kernel ("workbench"): its spec and `workbench kernel install`.

    workbench kernel install                 # into this environment (sys.prefix), name "workbench"
    workbench kernel install --user          # into ~/.local/share/jupyter
    workbench kernel install --prefix /p     # into /p/share/jupyter (set JUPYTER_PATH=/p/share/jupyter)
    workbench kernel show                    # print the spec that would be installed

The spec runs `<this interpreter> -m ipykernel_launcher`, so notebooks and papermill sweeps
(`workbench sweep --kernel workbench`) use the Python that has workbench installed, whatever
`python` is on PATH. `kernels/workbench/kernel.json` in the repository is the same spec with
argv[0] = "python" (jupyter_client maps that to the interpreter that launches Jupyter), for
`jupyter kernelspec install kernels/workbench`.

Environment set for the kernel: RAY_DEDUP_LOGS=0 (every Ray actor's log lines are shown, not
folded into "repeated Nx"), PYDEVD_DISABLE_FILE_VALIDATION=1 (silences the debugger's frozen
modules warning). MLFLOW_TRACKING_URI is inherited from the Jupyter server's environment;
unset, runs go to the project's sqlite store (workbench.tracking.store.default_tracking_uri).
`--tracking-uri URI` writes it into the installed spec instead (a path to an SQLite file, or a
relative sqlite:/// URI, is written as sqlite:///<absolute path>: the kernel starts in the
notebook's folder, not here).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from workbench.errors import UserError

KERNEL_NAME = "workbench"


def kernel_spec(python: str | None = None, tracking_uri: str | None = None) -> dict[str, Any]:
    """The kernel.json contents; `python` defaults to the current interpreter."""
    from workbench.tracking.store import normalize_uri

    env = {"RAY_DEDUP_LOGS": "0", "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    if tracking_uri:
        env["MLFLOW_TRACKING_URI"] = normalize_uri(tracking_uri)
    return {
        "argv": [python or sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "workbench",
        "language": "python",
        "interrupt_mode": "signal",
        "env": env,
        "metadata": {"debugger": True},
    }


def install(
    name: str = KERNEL_NAME,
    user: bool = False,
    prefix: str | None = None,
    tracking_uri: str | None = None,
    display_name: str | None = None,
) -> str:
    """Install the spec (argv[0] = sys.executable); return the folder it was written to.

    Neither `user` nor `prefix`: into this environment (sys.prefix), where a Jupyter started
    from the same environment finds it.
    """
    from jupyter_client.kernelspec import KernelSpecManager

    if user and prefix:
        raise UserError("give either --user or --prefix, not both")
    if not name or any(c not in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-" for c in name):
        raise UserError(f"kernel name {name!r} may contain only letters, digits, '.', '_' and '-'")
    spec = kernel_spec(tracking_uri=tracking_uri)
    # a second kernel (another name) shows its own name in Jupyter's launcher unless told otherwise
    spec["display_name"] = display_name or (name if name != KERNEL_NAME else spec["display_name"])
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "kernel.json").write_text(json.dumps(spec, indent=1) + "\n")
        _copy_logos(Path(tmp))
        try:
            return KernelSpecManager().install_kernel_spec(
                tmp, kernel_name=name, user=user, prefix=None if user else (prefix or sys.prefix)
            )
        except OSError as e:
            raise UserError(f"cannot install kernel '{name}': {e}") from None


def _copy_logos(dest: Path) -> None:
    try:
        import ipykernel

        resources = Path(ipykernel.__file__).parent / "resources"
        for logo in resources.glob("logo-*.png"):
            shutil.copy(logo, dest / logo.name)
    except Exception:  # noqa: BLE001 - logos are cosmetic
        pass


def is_installed(name: str) -> bool:
    from jupyter_client.kernelspec import KernelSpecManager

    return name in KernelSpecManager().find_kernel_specs()


def require_kernel(name: str) -> None:
    """UserError if Jupyter cannot find kernel `name` (before a sweep starts any point)."""
    from jupyter_client.kernelspec import KernelSpecManager

    found = KernelSpecManager().find_kernel_specs()
    if name not in found:
        hint = " Run `workbench kernel install`." if name == KERNEL_NAME else ""
        raise UserError(f"Jupyter kernel '{name}' is not installed (found: {sorted(found)}).{hint}")


def add_parser(subparsers, name: str) -> argparse.ArgumentParser:
    p = subparsers.add_parser(name, help="install the project's Jupyter kernel", description=__doc__.split("\n\n")[0],
                              epilog="examples:\n  workbench kernel install\n  workbench kernel install --tracking-uri http://HEAD_IP:5000\n"
                                     "  workbench kernel show", formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="kernel_command", metavar="ACTION")
    ins = sub.add_parser("install", help="install the 'workbench' kernel spec", description="Install the 'workbench' Jupyter kernel "
                         "spec (the kernel papermill and the sweeps run), for this interpreter.")
    where = ins.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="install for the current user")
    where.add_argument("--prefix", help="install under PREFIX/share/jupyter/kernels")
    ins.add_argument("--name", default=KERNEL_NAME, help="kernel name (default: workbench)")
    ins.add_argument("--display-name", help="name shown in Jupyter (default: the kernel's --name)")
    ins.add_argument("--tracking-uri", help="bake MLFLOW_TRACKING_URI into the kernel's environment")
    sub.add_parser("show", help="print the kernel spec for this interpreter", description="Print the kernel spec for this interpreter.")
    return p


def run(args: argparse.Namespace) -> int:
    action = getattr(args, "kernel_command", None)
    if action == "install":
        path = install(args.name, user=args.user, prefix=args.prefix, tracking_uri=args.tracking_uri, display_name=args.display_name)
        print(f"installed kernel '{args.name}' in {path}")
        return 0
    if action == "show":
        print(json.dumps(kernel_spec(), indent=1))
        return 0
    raise UserError("say what to do: `workbench kernel install` or `workbench kernel show`")
