"""`workbench plan` where the hub cannot be reached: each configs/gpu/ recipe gives one verdict, in GPUs
when GPUs are short, by term and fix when memory is, never a negative figure, and in seconds.

The hub is offline (HF_HUB_OFFLINE, an empty HF_HOME) or silent (a socket that accepts and never
answers); a hub model is given as a local config.json (`--model`) or seeded into a real hub cache
layout (tests/helpers/hub_cache.py) holding only config.json.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers.hub_cache import offline_hub, seed_model
from workbench.cli import main
from workbench.config import load_run_config
from workbench.errors import UserError

REPO = Path(__file__).resolve().parents[3]
RECIPES = sorted((REPO / "configs" / "gpu").glob("*.yaml"))
SHIPPED = REPO / "tests" / "data" / "model_configs"
CONFIG_JSON = {"Qwen/Qwen2.5-0.5B-Instruct": "qwen2.5-0.5b", "Qwen/Qwen2.5-1.5B-Instruct": "qwen2.5-1.5b",
               "Qwen/Qwen2.5-7B-Instruct": "qwen2.5-7b", "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b"}  # fmt: skip
NEGATIVE = re.compile(r"(?<![\w.])-\d")  # a minus sign before a figure (not "Qwen2.5-7B", not "--nodes")
QUICK_S = 20  # in-process: the plan's arithmetic and one missed cache lookup, on a loaded 2-core machine


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """HF_HUB_OFFLINE=1 and an empty HF_HOME: neither the hub model nor the hub dataset is reachable."""
    return offline_hub(monkeypatch, tmp_path / "hf")


def plan(capsys, *argv: str) -> tuple[int, str, str, float]:
    t = time.monotonic()
    rc = main(["plan", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err, time.monotonic() - t


def config_json(path: Path) -> Path:
    return SHIPPED / CONFIG_JSON[load_run_config(path).model.path] / "config.json"


def one_verdict(out: str) -> str:
    verdicts = [line for line in out.splitlines() if line.startswith("verdict:")]
    assert len(verdicts) == 1, out
    assert not NEGATIVE.search(out), out
    return verdicts[0]


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_each_recipe_offline_plans_on_its_hardware_too_few_gpus_and_an_8gb_card(offline, capsys, path):
    r = load_run_config(path).resources
    given = ["--config", str(path), "--model", str(config_json(path))]  # no --prompt-tokens: the dataset is not there
    rc, out, err, took = plan(capsys, *given)
    verdict = one_verdict(out)
    assert rc in (0, 1) and err == "" and took < QUICK_S
    assert "the model's bound" in out and "the task's dataset is not in the datasets cache" in out  # says what it used
    assert verdict == "verdict: fits" or verdict.startswith("verdict: does not fit at the model's bound of")

    rc, out, _, took = plan(capsys, *given, "--gpus-per-node", "1", "--gpu-memory", "80", "--nodes", "1")
    verdict = one_verdict(out)
    asked = r.trainer_gpus * r.trainer_workers + r.generator_gpus * load_run_config(path).generation.num_generators + r.evaluator_gpus
    if asked > 1:
        assert rc == 1 and verdict.startswith(f"verdict: does not fit: the recipe asks for {asked:g} GPUs; the cluster has 1")
        assert "GB" not in verdict and took < QUICK_S  # GPUs said as GPUs

    rc, out, _, took = plan(capsys, *given, "--gpus-per-node", str(r.num_gpus), "--gpu-memory", "8", "--nodes", str(r.nodes),
                            "--prompt-tokens", "512")  # fmt: skip
    verdict = one_verdict(out)
    assert rc == 1 and took < QUICK_S
    term = re.search(r"largest term: ([^,]+), [\d.]+ GB\): (\S.*)$", verdict)
    assert term and term.group(1) in out and term.group(2), verdict  # the term, as the table names it, and a fix


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_a_hub_id_not_in_the_cache_offline_says_in_one_line_how_to_give_its_config(offline, capsys, path):
    rc, out, err, took = plan(capsys, "--config", str(path))
    hub_id = load_run_config(path).model.path
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1 and took < QUICK_S
    assert f"{hub_id!r} is not in the Hugging Face cache" in err and "HF_HUB_OFFLINE is set" in err
    assert "--model DIR_OR_CONFIG" in err and f"hf download {hub_id} config.json" in err


def test_a_fresh_process_honours_hf_hub_offline(tmp_path):
    """What a user on a login node runs: the environment variable alone, read at import."""
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    env.pop("HF_HUB_CACHE", None)
    argv = [sys.executable, "-m", "workbench.cli", "plan", "--config", str(REPO / "configs" / "gpu" / "qwen7b-math-8gpu.yaml")]
    bad = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert bad.returncode == 2 and "--model DIR_OR_CONFIG" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    good = subprocess.run([*argv, "--model", str(SHIPPED / "qwen2.5-7b" / "config.json"), "--prompt-tokens", "2048"],
                          env=env, capture_output=True, text=True, timeout=300, cwd=REPO)  # fmt: skip
    assert good.returncode == 0 and one_verdict(good.stdout) == "verdict: fits", good.stdout + good.stderr
    assert "prompt tokens: 2,048 (given)" in good.stdout


def test_the_cached_snapshot_of_a_hub_id_is_planned_offline(offline, capsys, tmp_path):
    """A hub cache in huggingface_hub's layout (refs/main -> snapshots/<sha>/config.json -> blobs/)
    holding only config.json: the recipe's own hub id plans from it, with no network and no --model."""
    only_config = tmp_path / "only-config"
    only_config.mkdir()
    (only_config / "config.json").write_bytes((SHIPPED / "qwen2.5-7b" / "config.json").read_bytes())
    snap = seed_model(offline.parent, "Qwen/Qwen2.5-7B-Instruct", only_config)
    path = str(REPO / "configs" / "gpu" / "qwen7b-math-8gpu.yaml")
    rc, out, err, took = plan(capsys, "--config", path, "--prompt-tokens", "2048")
    assert rc == 0 and one_verdict(out) == "verdict: fits" and err == "" and took < QUICK_S
    assert "qwen2 7.616B parameters" in out and "8 GPU(s) x 80 GB" in out
    rc, out, _, _ = plan(capsys, "--config", path)  # no prompt length, no dataset, no tokenizer: the model's bound
    assert f"the model's bound: its context of 131,072 tokens less 14,336 new tokens" in out and one_verdict(out)
    rc, out, err, _ = plan(capsys, "--config", path, "--set", f"model.revision={snap.name}", "--prompt-tokens", "2048")
    assert rc == 0 and "7.616B" in out  # a commit sha names its snapshot
    rc, out, err, _ = plan(capsys, "--config", path, "--set", "model.revision=v9", "--prompt-tokens", "2048")
    assert rc == 2 and "--revision v9" in err and len(err.strip().splitlines()) == 1  # no such revision cached


def test_a_config_json_under_any_name_is_a_model(offline, capsys, tmp_path):
    mine = tmp_path / "llama8b.json"
    mine.write_bytes((SHIPPED / "llama-3.1-8b" / "config.json").read_bytes())
    rc, out, _, _ = plan(capsys, "--config", str(REPO / "configs" / "gpu" / "llama8b-math-2node.yaml"), "--model", str(mine),
                         "--prompt-tokens", "2048")  # fmt: skip
    assert rc == 0 and one_verdict(out) == "verdict: fits" and "8.030B parameters" in out
    (tmp_path / "broken.json").write_text("[1, 2]")
    rc, _, err, _ = plan(capsys, "--model", str(tmp_path / "broken.json"), "--gpu-memory", "80")
    assert rc == 2 and "is no config.json" in err and len(err.strip().splitlines()) == 1
    rc, _, err, _ = plan(capsys, "--model", "config.json", "--gpu-memory", "80")  # a typo'd path, not a hub id
    assert rc == 2 and "no such file: config.json" in err and len(err.strip().splitlines()) == 1


class SilentHub:
    """A socket that accepts connections and never answers: a hub behind a firewall that drops replies."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                self.accepted.append(self.sock.accept()[0])
            except OSError:
                return

    def close(self) -> None:
        for c in self.accepted:
            c.close()
        self.sock.close()


def test_an_unreachable_hub_costs_seconds_and_the_dataset_is_never_asked_for(monkeypatch, tmp_path, capsys):
    import datasets.config
    from huggingface_hub import constants

    from workbench.engine.plan import cluster_shape, plan_for

    offline_hub(monkeypatch, tmp_path / "hf")  # an empty cache ...
    hub = SilentHub()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # ... and online, with the hub silent
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    monkeypatch.setattr(datasets.config, "HF_ENDPOINT", hub.url)
    try:
        cfg = load_run_config(REPO / "configs" / "gpu" / "qwen7b-math-8gpu.yaml")
        t = time.monotonic()
        with pytest.raises(UserError, match=r"did not answer within 3 s: give its config with `workbench plan --model DIR_OR_CONFIG`"):
            plan_for(cfg, cluster_shape(cfg=cfg))
        assert time.monotonic() - t < QUICK_S  # the library's own retries: 5, up to 8 s apart, each after a 10 s timeout
        assert len(hub.accepted) == 1  # one probe of the hub, no retries
        local = load_run_config(REPO / "configs" / "gpu" / "qwen7b-math-8gpu.yaml", [f"model.path={SHIPPED / 'qwen2.5-7b' / 'config.json'}"])
        got = plan_for(local, cluster_shape(cfg=local))
        assert got.prompt_bound and len(hub.accepted) == 1  # the dataset was never asked for
        assert constants.HF_HUB_OFFLINE is False and datasets.config.HF_HUB_OFFLINE is False  # the switch is put back
    finally:
        hub.close()
