"""An error inside a Ray actor reaches the user as that error, in one line (engine/failures.py):
held constructor errors, Ray's wrappers taken off, crash noise and tracebacks kept in the run folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from tests.conftest import HELPERS
from workbench.engine.failures import RunFailed, describe_error, held_errors, show_one_line_in_ipython, user_error
from workbench.errors import UserError


class Picky:
    """Refuses a bad value in its constructor, as the generators refuse a misfit config."""

    def __init__(self, value: int):
        if value < 0:
            raise UserError(f"value must be >= 0, got {value}")
        self.value = value

    def ping(self) -> int:
        return self.value

    @staticmethod
    def helper() -> str:
        return "static"


def test_a_constructor_error_is_held_and_raised_by_every_call():
    cls = held_errors(Picky)
    assert cls.__name__ == "Picky" and cls.helper() == "static"  # `ray::Picky` in ps; static methods untouched
    assert cls(3).ping() == 3
    broken = cls(-1)  # no raise: the actor would live
    for _ in range(2):
        with pytest.raises(UserError, match="value must be >= 0, got -1"):
            broken.ping()


def test_ray_method_options_survive_the_wrapper():
    from workbench.engine.rollout.torch_backend import Generator

    wrapped = held_errors(Generator)
    assert wrapped.ping.__ray_concurrency_group__ == "io" and wrapped.generate.__ray_concurrency_group__ == "compute"


def test_wrapped_errors_are_unwrapped_to_their_line():
    import ray

    inner = UserError("forced interruption does not fit in max_new_tokens = 48")
    remote = ray.exceptions.RayTaskError("Generator.ping", "Traceback ...\nUserError: ...", inner).as_instanceof_cause()
    assert user_error(remote) is inner and describe_error(remote) == str(inner)
    nested = ray.exceptions.RayTaskError("Coordinator.run", "tb", RunFailed(str(inner))).as_instanceof_cause()
    assert describe_error(nested) == str(inner)
    bug = ray.exceptions.RayTaskError("Trainer.info", "tb", KeyError("x")).as_instanceof_cause()
    assert user_error(bug) is None and describe_error(bug).startswith("KeyError")


def test_a_notebook_cell_shows_the_one_line(capsys):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        show_one_line_in_ipython((UserError, RunFailed))
        result = shell.run_cell("from workbench.errors import UserError\nraise UserError('task.path: no such file: x.jsonl')")
        out = capsys.readouterr()
        assert not result.success  # the cell still fails (papermill stops on it)
        text = out.out + out.err
        assert "UserError" in text and "task.path: no such file: x.jsonl" in text and "Traceback" not in text
        assert len(text.strip().splitlines()) == 1
    finally:
        shell.set_custom_exc((), None)
        InteractiveShell.clear_instance()


# -- through `workbench run` and a real Ray cluster -------------------------------------------


@pytest.fixture(scope="module")
def mine(tmp_path_factory):
    """A config on a tiny random Qwen2-style folder and a question/answer JSONL (no warm-up to build)."""
    from tests.helpers.own_data import own_model_and_data

    root = tmp_path_factory.mktemp("mine")
    rows = [{"question": f"{a}+{b}=", "answer": str(a + b)} for a in range(10) for b in range(10)]
    own_model_and_data(root, rows)
    cfg = {"name": "mine", "recipe": {"base": "scalerl", "length_control": {"type": "none"}},
           "model": {"path": str(root / "qwen")},
           "task": {"name": "jsonl", "path": str(root / "data.jsonl"), "prompt_key": "question", "num_train": 80, "num_val": 20},
           # 9 new tokens: above the toy's 8, which a Hugging Face model is warned about before launch
           "generation": {"max_new_tokens": 9},
           "train": {"prompts_per_step": 4, "generations_per_prompt": 4, "max_steps": 8, "micro_batch_size": 16},
           "eval": {"every_steps": 4, "num_prompts": 10, "samples_per_prompt": 2},
           "resources": {"generator_cpus": 0.5, "trainer_cpus": 0.5},
           "tracking": {"mlflow": False}}  # stderr holds the failure alone (a tracked run first says where it tracks)  # fmt: skip
    (root / "mine.yaml").write_text(yaml.safe_dump(cfg))
    return root


def run_cli(root, out, *sets: str) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "workbench.cli", "run", "--config", str(root / "mine.yaml"), "--out", str(out), "--quiet"]
    for s in sets:
        args += ["--set", s]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HELPERS), os.environ.get("PYTHONPATH", "")]))
    env.pop("RAY_ADDRESS", None)
    return subprocess.run(args, capture_output=True, text=True, timeout=400, env=env)


def assert_one_line(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    # The failure is the last line and the only one; a line before it may be the run's own
    # warning (an untrained toy trips "not learning" when step 1 lands before the failure).
    assert lines and lines[-1].startswith("workbench run: run failed: "), proc.stderr
    assert all(line.startswith("mine: ") for line in lines[:-1]), proc.stderr
    for n in needles:
        assert n in lines[-1]
    for noise in ("SIGABRT", "Fatal Python error", "Traceback", "Stack trace", "ActorDiedError"):
        assert noise not in proc.stderr + proc.stdout


@pytest.mark.slow
def test_an_error_in_an_actors_constructor_is_one_line_and_the_dump_stays_in_the_run_folder(mine, tmp_path):
    out = tmp_path / "out"
    proc = run_cli(mine, out, "task.checker=bad_checkers:refused_in_generators")
    assert_one_line(proc, "this checker cannot run in a generator", f"(traceback: {out / 'error.log'})")
    record = (out / "error.log").read_text()  # the full remote traceback, constructor frames included
    assert "Traceback" in record and "in load_task" in record and "this checker cannot run in a generator" in record
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"].startswith("this checker cannot run") and summary["error_log"] == "error.log"
    assert (out / "logs" / "Generator-0.log").is_file() and (out / "logs" / "Trainer-0.log").is_file()


@pytest.mark.slow
def test_a_user_error_raised_mid_run_inside_an_actor_is_one_line(mine, tmp_path):
    out = tmp_path / "out"
    proc = run_cli(mine, out, "task.checker=bad_checkers:gives_up_mid_run")
    assert_one_line(proc, "the test verifier gave up after 40 checks")
    assert "the test verifier gave up" in (out / "error.log").read_text()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and "gave up after 40 checks" in summary["error"]


def test_a_method_marked_answers_when_broken_answers_after_a_failed_constructor():
    from workbench.engine.failures import answers_when_broken, held_errors

    class Broken:
        def __init__(self):
            raise UserError("model.path: no such directory: /run/model")

        @answers_when_broken
        def sees(self, path):
            return {"seen": path == "/run/token"}

        def info(self):
            return "never"

    b = held_errors(Broken)()
    assert b.sees("/run/token") == {"seen": True}  # the shared-folder check still gets its answer
    with pytest.raises(UserError, match="no such directory"):
        b.info()
