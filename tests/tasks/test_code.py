"""Code tasks: the JSONL forms load into sandboxed examples whose specs the sandbox judges; bad rows
stop the load in one line naming file, line and fix; HumanEval loads its 164 problems."""

from __future__ import annotations

import json

import pytest

from workbench.config import TaskConfig
from workbench.errors import UserError
from workbench.tasks.base import load_task
from workbench.tasks.code import CODE_TASKS, load_code_task
from workbench.tasks.sandbox import CodeCheck, LocalSandbox

ROWS = [
    {"prompt": "Write add(a, b).", "entry_point": "add", "cases": [{"args": [1, 2], "expected": 3}]},
    {"prompt": "Read two ints, print their sum.", "cases": [{"stdin": "1 2\n", "stdout": "3\n"}]},
    {"prompt": "Write inc(x).", "entry_point": "inc", "test": "def check(candidate):\n    assert candidate(1) == 2\n"},
    {"prompt": "Write neg(x).", "entry_point": "neg", "cases": [{"args": [4], "expected": -4}]},
]
RIGHT = {
    "Write add(a, b).": "```python\ndef add(a, b):\n    return a + b\n```",
    "Read two ints, print their sum.": "print(sum(map(int, input().split())))",
    "Write inc(x).": "def inc(x):\n    return x + 1",
    "Write neg(x).": "def neg(x):\n    return -x",
}


def write(tmp_path, rows, name="code.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def cfg(path, **kw):
    return TaskConfig(name="code", path=str(path), num_val=kw.pop("num_val", 1), **kw)


def test_every_form_loads_sandboxed_and_its_right_answer_passes(tmp_path):
    task = load_task(cfg(write(tmp_path, ROWS)))
    assert task.sandboxed and task.checker_name == "code" and task.name == "code"
    examples = task.train + task.val
    assert len(examples) == 4 and len(task.val) == 1
    with LocalSandbox() as sb:
        right = sb.run([CodeCheck(RIGHT[ex.prompt], ex.answer) for ex in examples])
        wrong = sb.run([CodeCheck("def nothing():\n    pass\n", ex.answer) for ex in examples])
    assert [v.verdict for v in right] == ["pass"] * 4
    assert not any(v.passed for v in wrong)
    with pytest.raises(UserError, match="sandbox"):
        task.checker("x", examples[0].answer)  # a code answer is never checked outside the sandbox


def test_the_split_is_seeded_and_disjoint(tmp_path):
    path = write(tmp_path, ROWS)
    a, b = load_code_task(cfg(path, seed=1)), load_code_task(cfg(path, seed=1))
    assert [e.id for e in a.val] == [e.id for e in b.val]
    assert not {e.prompt for e in a.val} & {e.prompt for e in a.train}


@pytest.mark.parametrize("row, words", [
    ({"prompt": "p", "entry_point": "f", "cases": []}, ["no test cases", "add at least one case"]),
    ({"prompt": "p", "entry_point": "f", "cases": [{"args": [1], "expected": float("nan")}]}, ["not JSON-serialisable"]),
    ({"prompt": "p", "tests": ["assert f(1) == 2"]}, ["unknown test form", "'cases'", "'test' + 'entry_point'"]),
    ({"prompt": "p", "test": "def check(c): pass"}, ["'entry_point'"]),
    ({"prompt": "p", "entry_point": "f", "cases": [{"args": [1]}]}, ["'expected'"]),
    ({"prompt": "p", "cases": [{"stdin": "1"}]}, ["'stdout'"]),
    ({"entry_point": "f", "cases": [{"args": [1], "expected": 1}]}, ["'prompt'", "task.prompt_key"]),
    ("{not json", ["malformed JSON"]),
])
def test_a_bad_row_is_one_line_naming_file_line_and_fix(tmp_path, row, words):
    path = write(tmp_path, [ROWS[0], row, ROWS[1]])
    with pytest.raises(UserError) as e:
        load_task(cfg(path))
    msg = str(e.value)
    assert "\n" not in msg and f"{path}:2:" in msg and all(w in msg for w in words), msg


def test_missing_file_empty_file_and_too_few_rows(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        load_task(cfg(tmp_path / "nope.jsonl"))
    with pytest.raises(UserError, match="required"):
        load_task(TaskConfig(name="code"))
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(UserError, match="no problems"):
        load_task(cfg(tmp_path / "empty.jsonl"))
    with pytest.raises(UserError, match="lower task.num_val"):
        load_task(cfg(write(tmp_path, ROWS), num_val=4))


def test_humaneval_loads_all_164_problems_as_validation():
    task = load_task(TaskConfig(name="humaneval", num_val=200))
    assert "humaneval" in CODE_TASKS and len(task.val) == 164 and task.train == [] and task.sandboxed
    assert task.stop and "\ndef " in task.stop
    assert all(f"def {json.loads(ex.answer)['entry_point']}(" in ex.prompt for ex in task.val)  # prompt = signature


def test_unknown_task_names_the_code_tasks():
    with pytest.raises(UserError, match="humaneval"):
        load_task(TaskConfig(name="kode"))
