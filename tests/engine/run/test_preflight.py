"""The driver's preflight (engine/run/preflight.py): every length the actors depend on is checked
from the tokenizer and config.json, before Ray starts, in one line naming the key and the fix."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import HELPERS
from workbench.engine.run.preflight import check_sequences, longest_prompt, policy_tokenizer
from workbench.errors import UserError


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    """A tiny random Qwen2-style folder (BPE tokenizer, ChatML template, context 256) and a
    question/answer JSONL, as a user brings them."""
    from tests.helpers.own_data import own_model_and_data

    root = tmp_path_factory.mktemp("mine")
    rows = [{"question": f"What is {a} plus {b}? Put the answer in \\boxed{{}}.", "answer": str(a + b)}
            for a in range(1, 30) for b in range(1, 5)]  # fmt: skip
    own_model_and_data(root, rows)
    return root


def qwen_config(root, **overrides):
    from workbench.config import run_config_from_dict

    base = {"model.path": str(root / "qwen"), "task.name": "jsonl", "task.path": str(root / "data.jsonl"),
            "task.prompt_key": "question", "task.chat_template": True, "task.num_train": 80, "task.num_val": 20,
            "eval.num_prompts": 10, "out_dir": str(root / "out")}  # fmt: skip
    return run_config_from_dict({}, {**base, **overrides})


def refusal(cfg) -> str:
    from workbench.tasks.base import load_task

    with pytest.raises(UserError) as e:
        check_sequences(cfg, load_task(cfg.task))
    return str(e.value)


def test_forced_interruption_misfit_is_the_actors_own_message(qwen_dir):
    """The issue's case: max_new_tokens 48 under the default interruption, refused by the same
    ForcedInterruption.from_config the generators call, with the phrase counted in BPE tokens."""
    msg = refusal(qwen_config(qwen_dir, **{"generation.max_new_tokens": 48}))
    assert msg.startswith("forced interruption does not fit in max_new_tokens = 48: thinking budget up to 36 + phrase ")
    assert "raise generation.max_new_tokens" in msg and "\n" not in msg


def test_prompt_past_the_context_names_max_new_tokens_and_config_json(qwen_dir):
    cfg = qwen_config(qwen_dir, **{"recipe.length_control.type": "none", "generation.max_new_tokens": 250})
    from workbench.tasks.base import load_task

    tok, context, _ = policy_tokenizer(cfg, load_task(cfg.task))
    n, _ = longest_prompt(tok, load_task(cfg.task))
    assert context == 256 and n > 20  # the chat template's tokens are counted, as the generators encode
    msg = refusal(cfg)
    assert f"is {n} tokens; with generation.max_new_tokens = 250 that is {n + 250} tokens, past the model's context of 256" in msg
    assert "max_position_embeddings" in msg and f"lower generation.max_new_tokens to {256 - n} or less" in msg
    # vLLM asks for one position more (its max_model_len): the limit moves by one
    msg = refusal(qwen_config(qwen_dir, **{"recipe.length_control.type": "none", "generation.backend": "vllm",
                                           "generation.max_new_tokens": 256 - n}))  # fmt: skip
    assert "vLLM's max_model_len" in msg and f"to {255 - n} or less" in msg
    check_sequences(cfg := qwen_config(qwen_dir, **{"recipe.length_control.type": "none",
                                                    "generation.max_new_tokens": 256 - n}), load_task(cfg.task))  # fits


def test_micro_batch_budget_below_the_longest_sequence(qwen_dir):
    msg = refusal(qwen_config(qwen_dir, **{"recipe.length_control.type": "none", "train.micro_batch_tokens": 40}))
    assert msg.startswith("train.micro_batch_tokens = 40 is below the longest sequence the trainer will see")
    assert "raise train.micro_batch_tokens to at least" in msg


def test_builtin_model_is_checked_without_being_built(tiny_config):
    """builtin:tiny: its character tokenizer and n_positions come from the task, nothing is built."""
    phrase = "12+34=46" * 3 + "=="  # in the task's alphabet (the default phrase is not: tests/engine/run/test_preflight_fields.py)
    cfg = tiny_config({"recipe.length_control.type": "interrupt", "generation.max_new_tokens": 48,
                       "recipe.length_control.phrase": phrase, "recipe.length_control.end_think": "==",
                       "model.cache_dir": "/nonexistent/never-built"})  # fmt: skip
    msg = refusal(cfg)
    assert f"phrase {len(phrase)} +" in msg  # one token per character of the phrase
    msg = refusal(tiny_config({"generation.max_new_tokens": 100, "model.cache_dir": "/nonexistent/never-built"}))
    assert "past the model's context of 64 (builtin:tiny's n_positions)" in msg
    msg = refusal(tiny_config({"task.chat_template": True, "model.cache_dir": "/nonexistent/never-built"}))
    assert msg.startswith("task.chat_template is true but the tokenizer in builtin:tiny has no chat template")


def test_stop_strings_the_tokenizer_cannot_spell(tiny_config):
    from workbench.tasks.base import load_task

    cfg = tiny_config()
    task = load_task(cfg.task)
    task.stop = ["\n\n"]  # addition's alphabet has no newline: the character tokenizer maps it to <unk>
    with pytest.raises(UserError, match="stop string '\\\\n\\\\n' cannot be spelled"):
        check_sequences(cfg, task)
    task.stop = ["+"]
    check_sequences(cfg, task)


# Calls `workbench run` (workbench.cli.main) in a fresh process with ray.init replaced by a
# recorder: an empty record proves the refusal came before any Ray cluster was started or joined.
DRIVER = """
import contextlib, io, json, sys
import ray
started = []
ray.init = lambda *a, **k: started.append(1) or (_ for _ in ()).throw(SystemExit("ray.init was called"))
from workbench.cli import main
out = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(argv)
    out.append({"rc": rc, "stderr": err.getvalue(), "ray_started": bool(started)})
print(json.dumps(out))
"""


@pytest.mark.slow
def test_each_misfit_is_refused_in_one_line_before_ray_starts(qwen_dir, tmp_path):
    import yaml

    cfg = {"name": "mine", "model": {"path": str(qwen_dir / "qwen")},
           "task": {"name": "jsonl", "path": str(qwen_dir / "data.jsonl"), "prompt_key": "question", "chat_template": True,
                    "num_train": 80, "num_val": 20},
           "generation": {"max_new_tokens": 48}, "eval": {"num_prompts": 10}}  # fmt: skip
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(cfg))
    base = ["run", "--config", str(path), "--out", str(tmp_path / "out"), "--quiet"]
    cases = [base, base + ["--set", "recipe.length_control.type=none", "--set", "generation.max_new_tokens=250"],
             base + ["--set", "recipe.length_control.type=none", "--set", "train.micro_batch_tokens=40"]]  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(cases)], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "PYTHONPATH": str(HELPERS)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout.splitlines()[-1])
    expected = ["forced interruption does not fit in max_new_tokens = 48", "past the model's context of 256",
                "train.micro_batch_tokens = 40 is below the longest sequence"]  # fmt: skip
    for res, needle in zip(results, expected):
        assert res["rc"] == 2 and not res["ray_started"], res
        assert res["stderr"].startswith("workbench run: error: ") and needle in res["stderr"], res["stderr"]
        assert res["stderr"].count("\n") == 1, res["stderr"]  # one line, no traceback
    for noise in ("Traceback", "SIGABRT", "Fatal Python error"):
        assert noise not in proc.stderr
