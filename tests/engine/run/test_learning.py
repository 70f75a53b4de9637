"""The not-learning watch (engine/run/learning.py): a run that learns nothing says so early, says
why (pass count, checker, sampled completions beside their answers), and can stop itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
import yaml

from tests.conftest import HELPERS
from workbench.config import run_config_from_dict
from workbench.engine.batch import Group, PackedGroups
from workbench.engine.model.sampling import Completion
from workbench.engine.run.learning import LearningWatch
from workbench.tasks.types import Example, TaskData, exact_checker


class Log:
    """What the watch writes to: the run's events and tags."""

    def __init__(self):
        self.events, self.tags = [], {}

    def event(self, text):
        self.events.append(text)

    def tag(self, key, value):
        self.tags[key] = value


def task() -> TaskData:
    train = [Example(i, f"{i}+1=", str(i + 1)) for i in range(8)]
    return TaskData("addition", train, train[:2], exact_checker, None, checker_name="exact")


def chunk(correct: list[list[bool]], text: str = "99") -> PackedGroups:
    """Groups of completions spelling `text` (one token per character: ord) for prompts 0, 1, ..."""
    groups = []
    for pid, oks in enumerate(correct):
        comps = [Completion([1, 2], [ord(c) for c in text], [0.0] * len(text), [0] * len(text), [True] * len(text), True, False)
                 for _ in oks]  # fmt: skip
        groups.append(Group(pid, 0, comps, oks, [1.0 if ok else -1.0 for ok in oks]))
    return PackedGroups.from_groups(groups)


def step_stats(groups: int, trained: int, zero_variance: float, truncation: float = 0.0) -> dict:
    return {"train/groups": float(groups), "train/sequences_trained": float(trained),
            "train/zero_variance_frac": zero_variance, "train/truncation_rate": truncation}  # fmt: skip


def watch(**train) -> LearningWatch:
    cfg = run_config_from_dict({}, {"train.generations_per_prompt": 2, **{f"train.{k}": v for k, v in train.items()}})
    return LearningWatch(cfg, task(), decode=lambda ids: "".join(map(chr, ids)))


def test_no_pass_warns_at_the_check_step_with_samples_and_answers():
    w, log, stop = watch(), Log(), threading.Event()
    for step in (1, 2, 3):
        w.saw(chunk([[False, False], [False, False]], text="forty-two"))
        w.after_step(step, step_stats(2, 0, 1.0, truncation=0.9), log, stop)
        if step == 1:  # every group dropped at the first step: told at once
            assert len(log.events) == 1 and "every group of step 1 was dropped by the zero-variance filter" in log.events[0]
    assert len(log.events) == 2 and "no completion has passed the checker in 3 steps" in log.events[1]
    msg = log.events[1]
    assert "0 of 12 sampled completions passed the checker 'exact'" in msg
    assert "'forty-two' => '1'" in msg and "'forty-two' => '2'" in msg  # completion beside its expected answer
    assert "90% of them ran into generation.max_new_tokens" in msg
    assert log.tags["workbench.not_learning"] == msg and w.warning == msg and not stop.is_set()
    s = w.summary(samples_trained=0)
    assert s["training"].startswith("nothing was trained: no completion has passed the checker in 3 steps")
    assert s["learning"]["passed"] == 0 and s["learning"]["sampled"] == 12 and len(s["learning"]["warnings"]) == 2


def test_low_trained_share_and_the_stop_option():
    w, log, stop = watch(stop_if_not_learning=True, min_trained_share=0.2), Log(), threading.Event()
    for step in (1, 2, 3):
        w.saw(chunk([[True, True], [False, False], [True, False]]))  # passes, but mostly zero variance
        w.after_step(step, step_stats(3, 1 if step < 3 else 0, 0.6), log, stop)
    assert any("only 11.1% of the sampled completions of steps 1-3 were trained on" in e for e in log.events)
    assert stop.is_set() and "train.stop_if_not_learning" in log.events[-1]
    assert w.summary(samples_trained=2)["learning"]["stopped_because"].startswith("not learning: only 11.1%")
    assert w.summary(samples_trained=2)["training"] == "trained on 2 sampled completions"


def test_a_learning_run_is_left_alone():
    w, log, stop = watch(stop_if_not_learning=True), Log(), threading.Event()
    for step in range(1, 10):
        w.saw(chunk([[True, False], [False, True]]))
        w.after_step(step, step_stats(2, 4, 0.0), log, stop)
    assert not log.events and not stop.is_set() and w.warning is None


# -- a real run that never passes ---------------------------------------------------------------


@pytest.fixture(scope="module")
def mine(tmp_path_factory):
    """A tiny random Qwen2-style folder and a question/answer JSONL: a random model, as in the issue."""
    from tests.helpers.own_data import own_model_and_data

    root = tmp_path_factory.mktemp("mine")
    rows = [{"question": f"What is {a} plus {b}?", "answer": str(a + b)} for a in range(10) for b in range(10)]
    own_model_and_data(root, rows)
    return root


def mine_config(root, out, **more) -> dict:
    cfg = {"name": "never", "out_dir": str(out), "recipe": {"base": "scalerl", "length_control": {"type": "none"}},
           "model": {"path": str(root / "qwen")},
           "task": {"name": "jsonl", "path": str(root / "data.jsonl"), "prompt_key": "question", "num_train": 80,
                    "num_val": 20, "checker": "bad_checkers:never_passes"},
           "generation": {"max_new_tokens": 6},
           "train": {"prompts_per_step": 4, "generations_per_prompt": 4, "max_steps": 4, "micro_batch_size": 16},
           "eval": {"every_steps": 4, "num_prompts": 8, "samples_per_prompt": 2},
           "resources": {"generator_cpus": 0.5, "trainer_cpus": 0.5}}  # fmt: skip
    for section, values in more.items():
        cfg[section] = {**cfg.get(section, {}), **values}
    return cfg


@pytest.mark.slow
def test_a_run_whose_checker_never_passes_says_so_in_the_terminal_summary_and_mlflow(mine, tmp_path):
    from mlflow import MlflowClient

    out, uri = tmp_path / "out", f"sqlite:///{tmp_path / 'mlflow.db'}"
    path = tmp_path / "never.yaml"
    path.write_text(yaml.safe_dump(mine_config(mine, out, tracking={"mlflow": True, "tracking_uri": uri, "experiment": "never"})))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HELPERS), os.environ.get("PYTHONPATH", "")]))
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, "-m", "workbench.cli", "run", "--config", str(path), "--no-report"],
                          capture_output=True, text=True, timeout=400, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    warned = [line for line in proc.stderr.replace("\r", "\n").splitlines() if "never: not learning:" in line]
    assert any("no completion has passed the checker in 3 steps" in line for line in warned), proc.stderr  # within 5 steps
    assert all("0 of" in line and "passed the checker 'bad_checkers:never_passes'" in line and " => " in line for line in warned)
    assert "workbench run: finished, but nothing was trained: " in proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["training"].startswith("nothing was trained")
    assert summary["learning"]["passed"] == 0 and summary["learning"]["warnings"]
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("never").experiment_id])
    assert run.data.tags["workbench.not_learning"].startswith("not learning: ")


@pytest.mark.slow
def test_stop_if_not_learning_stops_the_run_early(ray_cluster, mine, tmp_path, monkeypatch):
    from workbench.engine import run_to_end

    monkeypatch.syspath_prepend(str(HELPERS))  # the driver imports the checker too (its actors get PYTHONPATH)

    cfg = run_config_from_dict(mine_config(mine, tmp_path / "out", train={"max_steps": 40, "stop_if_not_learning": True}))
    summary = run_to_end(cfg, resume=False)
    assert summary["status"] == "stopped" and summary["steps"] < 10
    assert summary["learning"]["stopped_because"].startswith("not learning: no completion has passed the checker in 3 steps")
    assert summary["training"].startswith("nothing was trained")


def test_an_environments_cut_episodes_name_the_episode_budgets():
    cfg = run_config_from_dict({}, {"train.generations_per_prompt": 2, "task.name": "env", "task.env": "env_fixtures:AddEnv",
                                    "recipe.length_control.type": "none", "env.max_turns": 3})  # fmt: skip
    w, log, stop = LearningWatch(cfg, task(), decode=lambda ids: "".join(map(chr, ids))), Log(), threading.Event()
    for step in (1, 2, 3):
        w.saw(chunk([[False, False], [False, False]]))
        w.after_step(step, step_stats(2, 0, 1.0, truncation=0.8), log, stop)
    assert "80% of the episodes were cut by a budget" in log.events[-1] and "env.max_turns = 3" in log.events[-1]
    assert "raise it?" not in log.events[-1]
