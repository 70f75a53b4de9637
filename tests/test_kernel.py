"""The project's Jupyter kernel: the spec, installing it, and papermill running a notebook on it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import papermill
import pytest
from jupyter_client.kernelspec import KernelSpecManager

from workbench.cli import main
from workbench.errors import UserError
from workbench.kernel import install, kernel_spec, require_kernel

ROOT = Path(__file__).resolve().parent.parent


def test_spec_runs_this_interpreter_with_ipykernel():
    spec = kernel_spec()
    assert spec["argv"] == [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    assert spec["display_name"] == "workbench" and spec["language"] == "python"
    assert spec["env"]["RAY_DEDUP_LOGS"] == "0"
    assert "MLFLOW_TRACKING_URI" not in spec["env"]  # inherited unless asked for
    assert kernel_spec(tracking_uri="http://h:5000")["env"]["MLFLOW_TRACKING_URI"] == "http://h:5000"


def test_repository_kernel_json_is_the_same_spec():
    shipped = json.loads((ROOT / "kernels" / "workbench" / "kernel.json").read_text())
    assert shipped == kernel_spec(python="python")


@pytest.fixture
def jupyter_prefix(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "share" / "jupyter"))
    return tmp_path


def test_install_into_prefix_is_found_by_jupyter(jupyter_prefix):
    path = install("workbench", prefix=str(jupyter_prefix))
    assert Path(path) == jupyter_prefix / "share" / "jupyter" / "kernels" / "workbench"
    spec = KernelSpecManager().get_kernel_spec("workbench")
    assert spec.argv[0] == sys.executable  # rewritten to the installing interpreter
    assert spec.display_name == "workbench" and spec.env["RAY_DEDUP_LOGS"] == "0"
    require_kernel("workbench")  # no error once installed


def test_cli_install_with_name_and_tracking_uri(jupyter_prefix, capsys):
    code = main(["kernel", "install", "--prefix", str(jupyter_prefix), "--name", "wb-test", "--tracking-uri", "sqlite:////x/mlflow.db"])
    assert code == 0
    assert "installed kernel 'wb-test'" in capsys.readouterr().out
    spec = KernelSpecManager().get_kernel_spec("wb-test")
    assert spec.env["MLFLOW_TRACKING_URI"] == "sqlite:////x/mlflow.db"
    assert spec.display_name == "wb-test"  # told apart from the default kernel in Jupyter's launcher


def test_a_plain_path_tracking_uri_is_baked_in_as_an_absolute_sqlite_uri(jupyter_prefix, tmp_path, monkeypatch):
    # the kernel starts in each notebook's folder: a relative path would name another file there
    monkeypatch.chdir(tmp_path)
    assert main(["kernel", "install", "--prefix", str(jupyter_prefix), "--name", "wb-rel", "--tracking-uri", "mlflow.db"]) == 0
    spec = KernelSpecManager().get_kernel_spec("wb-rel")
    assert spec.env["MLFLOW_TRACKING_URI"] == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"


def test_bad_requests_are_user_errors(jupyter_prefix, capsys):
    with pytest.raises(UserError, match="either --user or --prefix"):
        install(user=True, prefix=str(jupyter_prefix))
    with pytest.raises(UserError, match="kernel name"):
        install("bad name!", prefix=str(jupyter_prefix))
    with pytest.raises(UserError, match="'nope' is not installed"):
        require_kernel("nope")
    assert main(["kernel"]) == 2
    assert "workbench kernel install" in capsys.readouterr().err


@pytest.mark.slow
def test_papermill_runs_a_notebook_on_the_installed_kernel(jupyter_prefix, tmp_path):
    install("workbench", prefix=str(jupyter_prefix))
    out = tmp_path / "out.ipynb"
    papermill.execute_notebook(
        str(ROOT / "tests" / "data" / "kernel_check.ipynb"), str(out), parameters={"marker": "from-test"},
        kernel_name="workbench", progress_bar=False,
    )
    nb = nbformat.read(str(out), as_version=4)
    text = "".join(o.get("text", "") for cell in nb["cells"] for o in cell.get("outputs", []))
    seen = json.loads(text.strip().splitlines()[-1])
    # RAY_DEDUP_LOGS comes from the workbench spec's env: proof the named kernel ran it
    assert seen == {"python": sys.executable, "ray_dedup": "0", "marker": "from-test"}
