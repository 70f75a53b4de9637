"""`workbench check`: saved completions scored against any task, no run and no Ray."""

from __future__ import annotations

import json

import pytest
import yaml

from workbench.cli import main
from workbench.tasks.base import load_task
from workbench.config import load_run_config

MIX = {
    "task": {"mix": [
        {"name": "addition", "difficulty": 1, "domain": "math", "num_train": 60, "num_val": 10},
        {"name": "pyexpr", "difficulty": 1, "domain": "code", "num_train": 40, "num_val": 10},
    ]},
    "eval": {"num_prompts": 10},
}  # fmt: skip


def write(tmp_path, name, data):
    path = tmp_path / name
    if name.endswith(".yaml"):
        path.write_text(yaml.safe_dump(data))
    else:
        path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in data))
    return str(path)


def check(capsys, *args):
    rc = main(["check", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def as_json(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines()]


def test_a_synthetic_task_rows_are_the_generated_problems_train_first(tmp_path, capsys):
    cfg = write(tmp_path, "c.yaml", {"task": {"name": "addition", "difficulty": 1, "num_train": 60, "num_val": 10}, "eval": {"num_prompts": 10}})
    task = load_task(load_run_config(cfg).task)
    right, val_row = task.train[3].answer, 60 + 2  # row 62 is the third validation problem
    comp = write(tmp_path, "c.jsonl", [{"example": 3, "completion": right}, {"example": val_row, "completion": task.val[2].answer},
                                       {"example": 0, "completion": "nope"}])  # fmt: skip
    rc, out, _ = check(capsys, "--config", cfg, "--completions", comp, "--json")
    assert rc == 0
    rows = as_json(out)
    assert [set(r) for r in rows] == [{"example", "domain", "verdict", "reward", "seconds"}] * 3
    assert [(r["example"], r["domain"], r["verdict"], r["reward"]) for r in rows] == [
        (3, "addition", "pass", 1.0), (62, "addition", "pass", 1.0), (0, "addition", "fail", -1.0)]
    rc, out, _ = check(capsys, "--config", cfg, "--completions", comp)
    assert rc == 0 and len(out.splitlines()) == 3 and "domain addition" in out and "pass" in out


def test_a_math_file_row_is_the_line_of_the_file(tmp_path, capsys):
    data = write(tmp_path, "m.jsonl", [{"prompt": f"q{i}", "answer": str(i / 2)} for i in range(6)] + [""])
    cfg = write(tmp_path, "c.yaml", {"task": {"name": "jsonl", "path": data, "num_val": 2}, "eval": {"num_prompts": 2}})
    comp = write(tmp_path, "c.jsonl", [{"example": 4, "completion": "The answer is $\\frac{2}{1}$"},
                                       {"example": 1, "completion": "\\boxed{0.5}"}, {"example": 0, "completion": "7"}])  # fmt: skip
    rc, out, _ = check(capsys, "--config", cfg, "--completions", comp, "--json")
    assert rc == 0
    assert [(r["example"], r["verdict"]) for r in as_json(out)] == [(4, "pass"), (1, "pass"), (0, "fail")]
    bad = write(tmp_path, "b.jsonl", [{"example": 6, "completion": "1"}])  # line 7 is blank: not an example
    rc, out, err = check(capsys, "--config", cfg, "--completions", bad)
    assert rc == 2 and out == "" and "b.jsonl:1: example row 6 does not exist" in err and len(err.splitlines()) == 1


def test_code_is_checked_in_the_sandbox_and_a_mix_reports_domains(tmp_path, capsys):
    cfg = write(tmp_path, "c.yaml", MIX)
    task = load_task(load_run_config(cfg).task)
    code = next(ex for ex in task.val if ex.domain == "code")
    code_row = code.id - 70  # the row in the code source (the math source spans rows 0..69)
    comp = write(tmp_path, "c.jsonl", [
        {"example": code.id, "completion": code.reference},           # a global row of the mix
        {"example": code_row, "domain": "code", "completion": "import sys; sys.exit(0)"},
        {"example": code_row, "domain": "code", "completion": "sum(i for i in iter(int, 1))"},
        {"example": 5, "domain": "math", "completion": task.parts["math"].train[5].answer},
    ])  # fmt: skip
    rc, out, _ = check(capsys, "--config", cfg, "--completions", comp, "--json")
    assert rc == 0
    rows = as_json(out)
    assert [(r["domain"], r["verdict"]) for r in rows] == [("code", "pass"), ("code", "error"), ("code", "timeout"), ("math", "pass")]
    assert rows[2]["reward"] == -1.0 and rows[2]["seconds"] >= 1.0  # CPU seconds of the endless loop


@pytest.mark.parametrize(
    "lines, needle",
    [
        (['{"example": 0, "completion": "1"}', '{"example": 1, "completion": '], "c.jsonl:2: malformed JSON"),
        (['{"example": "0", "completion": "1"}'], 'c.jsonl:1: each line is {"example": ROW (an integer)'),
        (['{"example": 0}'], "c.jsonl:1: each line is"),
        (['{"example": 0, "completion": "x"}', '{"example": 999, "completion": "x"}'], "c.jsonl:2: example row 999 does not exist"),
        (['{"example": 0, "domain": "chem", "completion": "x"}'], "c.jsonl:1: unknown domain 'chem' (domains: math, code)"),
    ],
)
def test_bad_input_is_one_line_with_nothing_run(tmp_path, capsys, lines, needle):
    cfg = write(tmp_path, "c.yaml", MIX)
    comp = write(tmp_path, "c.jsonl", lines)
    rc, out, err = check(capsys, "--config", cfg, "--completions", comp)
    assert rc == 2 and out == ""  # nothing checked, nothing printed
    assert needle in err and len(err.strip().splitlines()) == 1


def test_a_code_file_row_is_its_line_and_runs_in_the_sandbox(tmp_path, capsys):
    rows = [{"prompt": f"add{i}", "entry_point": "add", "cases": [{"args": [i, 2], "expected": i + 2}]} for i in range(3)]
    data = write(tmp_path, "code.jsonl", [rows[0], "", rows[1], rows[2]])  # line 2 blank: rows 0, 2, 3
    cfg = write(tmp_path, "c.yaml", {"task": {"name": "code", "path": data, "num_val": 1}, "eval": {"num_prompts": 1}})
    comp = write(tmp_path, "c.jsonl", [{"example": 3, "completion": "def add(a, b):\n    return a + b"},
                                       {"example": 2, "completion": "def add(a, b):\n    return a - b"}])  # fmt: skip
    rc, out, _ = check(capsys, "--config", cfg, "--completions", comp, "--json")
    assert rc == 0 and [(r["example"], r["domain"], r["verdict"]) for r in as_json(out)] == [(3, "code", "pass"), (2, "code", "fail")]
    rc, out, err = check(capsys, "--config", cfg, "--completions", write(tmp_path, "b.jsonl", [{"example": 1, "completion": "x"}]))
    assert rc == 2 and out == "" and "example row 1 does not exist" in err


def test_reward_functions_are_called_and_each_ones_values_printed(tmp_path, capsys, monkeypatch):
    """With reward.functions, check calls them as a run does (a TRL accuracy_reward: None for a gold
    solution it cannot parse) and prints each one's name and values, the weighted reward and the
    pass function's verdict."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "helpers"))
    rows = [{"prompt": f"{i}+{i}=", "answer": str(2 * i), "solution": "see the figure" if i == 3 else str(2 * i)} for i in range(6)]
    data = write(tmp_path, "d.jsonl", rows)
    functions = [{"fn": "trl_rewards:accuracy_reward", "pass": True}, {"fn": "trl_rewards:short_bonus", "weight": 0.5}]
    cfg = write(tmp_path, "c.yaml", {"task": {"name": "jsonl", "path": data, "num_val": 2, "checker": "exact"},
                                     "eval": {"num_prompts": 2}, "reward": {"functions": functions}})  # fmt: skip
    comp = write(tmp_path, "c.jsonl", [{"example": 2, "completion": "4"}, {"example": 1, "completion": "5"},
                                       {"example": 3, "completion": "6"}])  # fmt: skip
    rc, out, _ = check(capsys, "--config", cfg, "--completions", comp, "--json")
    assert rc == 0
    got = as_json(out)
    assert [(r["verdict"], r["values"]["accuracy_reward"]) for r in got] == [("pass", 1.0), ("fail", 0.0), ("not_applicable", None)]
    assert [r["reward"] for r in got] == pytest.approx([1.0 + 0.25, 0.25, 0.25])  # + 0.5 x short_bonus (1 / (1 + 1))
    assert [r["values"]["short_bonus"] for r in got] == [0.5] * 3
    rc, out, _ = check(capsys, "--config", cfg, "--completions", comp)
    lines = out.splitlines()
    assert rc == 0 and lines[0] == "reward functions: accuracy_reward (weight 1, decides pass / fail), short_bonus (weight 0.5)"
    assert "accuracy_reward 1  short_bonus 0.5" in lines[1] and "not_applicable" in lines[3] and "accuracy_reward none" in lines[3]
    assert lines[-2:] == ["accuracy_reward: mean +0.5 std 0.7071 over 2, none on 1", "short_bonus: mean +0.5 std 0 over 3, none on 0"]


def test_an_environment_task_is_refused_in_one_line(tmp_path, capsys):
    rows = write(tmp_path, "calc.jsonl", [{"prompt": f"Add {i} and 1.", "answer": i + 1} for i in range(12)])
    cfg = write(tmp_path, "env.yaml", {"task": {"name": "env", "env": "workbench.envs.calculator:CalculatorEnv", "path": rows,
                                                "num_val": 2}, "eval": {"num_prompts": 2},
                                       "recipe": {"base": "scalerl", "length_control": {"type": "none"}}})  # fmt: skip
    completions = write(tmp_path, "c.jsonl", [{"example": 0, "completion": "2"}])
    rc, out, err = check(capsys, "--config", cfg, "--completions", completions)
    assert rc != 0 and out == "" and "scores whole episodes" in err and "Traceback" not in err
