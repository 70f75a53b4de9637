"""A CPU run's plan counts what the host holds beside the actors' tensors (each process's runtime,
the driver's) and budgets Ray's share of the host, where its OOM killer stops a worker: the
smollm2-tools runs it stopped at micro_batch_tokens 4096 are refused before launch now, and the
2048 the config trains at, which ran 19 steps at 11.6 GB, still fits."""

from __future__ import annotations

import dataclasses
import re

import pytest

from tests.engine.plan.test_attention_memory import SMOLLM2
from tests.engine.plan.test_attention_memory import cpu as trainer_settings
from workbench.engine.model.devices import CPU_KV_CACHE_GIB
from workbench.engine.plan.fit import make_plan
from workbench.engine.plan.host import RAY_THRESHOLD, RUNTIME_DRIVER, RUNTIME_TORCH, RUNTIME_VLLM, host_budget, ray_threshold
from workbench.engine.plan.memory import GB, Cluster

HOST = Cluster(0, 25.28 * GB, source="this host")  # the 24 GiB machine the runs were measured on


def cpu(**kw):
    """configs/smollm2-tools.yaml's actors on this host: its trainer, vLLM-CPU engines with their KV cache."""
    return trainer_settings(vllm_kv_bytes=int(CPU_KV_CACHE_GIB * 2**30), **kw)


def _host(plan):
    return next(r for r in plan.roles if r.name == "all actors")


def test_the_host_budget_is_rays_share_and_holds_every_process_runtime():
    plan = make_plan(SMOLLM2, cpu(micro_batch_tokens=2048, kept_versions=1, evaluates=True, evaluator_vllm_cpu=True), HOST)
    host = _host(plan)
    assert host.budget == pytest.approx(RAY_THRESHOLD * HOST.gpu_memory) and "RAY_memory_usage_threshold" in host.notes[0]
    runtime = {k: v for k, v in host.terms.items() if k.startswith("runtime")}
    # the trainer is the one torch process; the generator and the environment's evaluator are vLLM-CPU engines
    assert runtime == {"runtime: driver, coordinator, Ray": RUNTIME_DRIVER, "runtime: 1 torch process": RUNTIME_TORCH,
                       "runtime: 2 vLLM-CPU engines": 2 * RUNTIME_VLLM}  # fmt: skip
    assert host.need == pytest.approx(sum(host.terms.values())) and plan.fits


def test_a_torch_evaluator_is_a_torch_process_and_no_evaluator_is_none():
    torch_eval = _host(make_plan(SMOLLM2, cpu(micro_batch_tokens=2048, evaluates=True, evaluator_vllm_cpu=False), HOST))
    assert torch_eval.terms["runtime: 2 torch processes"] == 2 * RUNTIME_TORCH
    assert torch_eval.terms["runtime: 1 vLLM-CPU engine"] == RUNTIME_VLLM
    none = _host(make_plan(SMOLLM2, cpu(micro_batch_tokens=2048, evaluates=False), HOST))
    assert "evaluator" not in none.terms and none.terms["runtime: 1 vLLM-CPU engine"] == RUNTIME_VLLM


def test_the_runs_rays_oom_killer_stopped_are_refused_and_the_measured_setting_fits():
    """micro_batch_tokens 4096 with an evaluator: the trainer reached 17.2-17.6 GB and Ray stopped the run
    (docs/measured.md, Memory); 2048: 11.6 GB, 19 steps, no stop."""
    stopped = make_plan(SMOLLM2, cpu(micro_batch_tokens=4096, kept_versions=1, evaluates=True, evaluator_vllm_cpu=True), HOST)
    assert not stopped.fits and not _host(stopped).fits
    # the fix it names is the trainer's room after the other processes, and it fits
    tokens = int(re.search(r"lower train.micro_batch_tokens to ([\d,]+)", stopped.verdict).group(1).replace(",", ""))
    assert stopped.verdict.startswith("does not fit: all actors together need") and tokens < 4096
    fixed = make_plan(SMOLLM2, cpu(micro_batch_tokens=tokens, kept_versions=1, evaluates=True, evaluator_vllm_cpu=True), HOST)
    assert fixed.fits
    ran = make_plan(SMOLLM2, cpu(micro_batch_tokens=2048, kept_versions=1, evaluates=False), HOST)
    assert ran.fits


def test_rays_threshold_is_read_from_its_environment_variable(monkeypatch):
    monkeypatch.setenv("RAY_memory_usage_threshold", "0.8")
    assert ray_threshold() == 0.8 and host_budget(10 * GB)[0] == pytest.approx(8 * GB)
    for bad in ("2", "0", "lots"):
        monkeypatch.setenv("RAY_memory_usage_threshold", bad)
        assert ray_threshold() == RAY_THRESHOLD
    monkeypatch.delenv("RAY_memory_usage_threshold")
    plan = make_plan(SMOLLM2, dataclasses.replace(cpu(micro_batch_tokens=2048), evaluates=False), HOST)
    assert _host(plan).budget == pytest.approx(0.95 * HOST.gpu_memory)
