"""The install paths agree: pyproject.toml, environment.yml, the Makefile and CI."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]


def pyproject_requirements() -> dict[str, Requirement]:
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    reqs = data["project"]["dependencies"] + data["project"]["optional-dependencies"]["dev"]
    return {Requirement(r).name.lower(): Requirement(r) for r in reqs}


def conda_pip_requirements() -> dict[str, Requirement]:
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    return {Requirement(r).name.lower(): Requirement(r) for r in pip if not r.startswith("-e")}


def test_environment_yml_lists_the_same_dependencies_as_pyproject():
    py, conda = pyproject_requirements(), conda_pip_requirements()
    assert set(py) == set(conda), f"only in pyproject: {set(py) - set(conda)}; only in environment.yml: {set(conda) - set(py)}"
    for name, req in py.items():
        if name == "torch":
            continue
        assert str(req.specifier) == str(conda[name].specifier), name
        assert req.extras == conda[name].extras, name


def test_cpu_torch_pin_satisfies_the_project_range():
    pinned = conda_pip_requirements()["torch"]
    (spec,) = list(pinned.specifier)
    assert spec.operator == "=="
    assert Version(spec.version) in pyproject_requirements()["torch"].specifier
    makefile = (REPO / "Makefile").read_text()
    assert f"torch=={spec.version}" in makefile, "the Makefile must install the same CPU torch pin"


def test_vllm_only_in_the_gpu_extra():
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert not any(d.startswith("vllm") for d in data["project"]["dependencies"])
    assert any(d.startswith("vllm") for d in data["project"]["optional-dependencies"]["gpu"])


def test_ci_runs_the_readme_test_command():
    assert "make test" in (REPO / ".ci" / "run").read_text()
    readme = (REPO / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
