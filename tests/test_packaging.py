"""The install paths agree: pyproject.toml, environment.yml, env/requirements-gpu.txt, the Makefile and CI."""

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


def gpu_requirements() -> dict[str, Requirement]:
    lines = [line.split("#", 1)[0].strip() for line in (REPO / "env" / "requirements-gpu.txt").read_text().splitlines()]
    return {Requirement(r).name.lower(): Requirement(r) for r in lines if r}


def test_vllm_only_in_the_gpu_extra_pinned_as_in_the_gpu_set():
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert not any(d.startswith("vllm") for d in data["project"]["dependencies"])
    (extra,) = [Requirement(d) for d in data["project"]["optional-dependencies"]["gpu"] if d.startswith("vllm")]
    assert str(extra.specifier) == str(gpu_requirements()["vllm"].specifier) == "==0.32.0"


def test_gpu_set_pins_every_dependency_within_the_project_ranges():
    gpu, py = gpu_requirements(), pyproject_requirements()
    for name, req in gpu.items():
        (spec,) = list(req.specifier)
        assert spec.operator == "==", f"{name} is not pinned in env/requirements-gpu.txt: {req}"
    runtime = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    for name in (Requirement(r).name.lower() for r in runtime):
        assert name in gpu, f"{name} (a project dependency) is missing from env/requirements-gpu.txt"
        (spec,) = list(gpu[name].specifier)
        assert Version(spec.version) in py[name].specifier, f"{name}=={spec.version} is outside pyproject's {py[name].specifier}"
        assert gpu[name].extras == py[name].extras, name
    assert str(gpu["torch"].specifier) == "==2.13.0" and str(gpu["ray"].specifier) == "==2.60.0"  # vLLM 0.32.0's torch = CI's


def test_gpu_check_target_runs_the_check_script_without_touching_demo_or_test():
    makefile = (REPO / "Makefile").read_text()
    target = re.search(r"^gpu-check:\n\t(.+)$", makefile, re.M)
    assert target and "benchmarks/gpu_check.py" in target.group(1)
    assert "gpu-check" in re.search(r"^\.PHONY:(.*)$", makefile, re.M).group(1)
    assert "gpu" not in re.search(r"^test:(.*)$", makefile, re.M).group(1)  # `make test` does not need a GPU


def test_gpu_check_without_cuda_stops_with_one_line():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py")], capture_output=True, text=True,
                          timeout=300, env={**__import__("os").environ, "CUDA_VISIBLE_DEVICES": ""})  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "needs a CUDA GPU" in lines[0] and "torch" in lines[0], proc.stderr


def test_ci_runs_the_readme_test_command():
    assert "make test" in (REPO / ".ci" / "run").read_text()
    readme = (REPO / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
