"""JSONL / Parquet loading with clear errors, and the math-verify checker (also off the main thread)."""

from __future__ import annotations

import json
import threading

import pandas as pd
import pytest

from workbench.config import TaskConfig
from workbench.errors import UserError
from workbench.tasks.base import load_task
from workbench.tasks.files import math_checker


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _rows(n):
    return [{"q": f"What is {i} + {i}?", "a": 2 * i} for i in range(n)]


def test_jsonl_loads_with_config_keys_and_math_checker(tmp_path):
    path = _write_jsonl(tmp_path / "d.jsonl", _rows(30))
    task = load_task(TaskConfig(name="jsonl", path=str(path), prompt_key="q", answer_key="a", num_train=100, num_val=5))
    assert task.checker_name == "math"
    assert len(task.val) == 5 and len(task.train) == 25  # train takes the rest, up to num_train
    ex = task.val[0]
    n = int(ex.prompt.split()[2])
    assert ex.answer == str(2 * n)  # numeric answers become text
    assert ex.id == n + 1  # id = the line number in the file
    assert task.checker(f"so the answer is $\\boxed{{{2 * n}}}$", ex.answer)
    assert set("What is") <= set(task.alphabet)


def test_file_split_is_seeded_disjoint_and_capped(tmp_path):
    rows = _rows(50) + [{"q": "What is 0 + 0?", "a": 0}]  # a repeated prompt is kept once
    path = _write_jsonl(tmp_path / "d.jsonl", rows)
    cfg = dict(name="jsonl", path=str(path), prompt_key="q", answer_key="a", num_val=10)
    a = load_task(TaskConfig(**cfg, num_train=20, seed=1))
    b = load_task(TaskConfig(**cfg, num_train=20, seed=1))
    c = load_task(TaskConfig(**cfg, num_train=20, seed=2))
    assert a.train == b.train and a.val == b.val and a.val != c.val
    assert len(a.train) == 20
    prompts = [ex.prompt for ex in a.train + a.val]
    assert len(prompts) == len(set(prompts))
    full = load_task(TaskConfig(**cfg, num_train=1000, seed=1))
    assert len(full.train) + len(full.val) == 50


def test_malformed_jsonl_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"q": "a", "a": 1}\n\n{"q": "b", "a": \n')
    with pytest.raises(UserError, match=r"bad\.jsonl:3: malformed JSON"):
        load_task(TaskConfig(name="jsonl", path=str(path), prompt_key="q", answer_key="a"))


def test_missing_key_names_file_line_and_key(tmp_path):
    path = _write_jsonl(tmp_path / "d.jsonl", [{"q": "x", "a": 1}, {"q": "y", "answer": 2}])
    with pytest.raises(UserError, match=r"d\.jsonl:2: missing key 'a'"):
        load_task(TaskConfig(name="jsonl", path=str(path), prompt_key="q", answer_key="a"))


def test_bad_values_and_empty_or_missing_file(tmp_path):
    path = _write_jsonl(tmp_path / "d.jsonl", [{"q": "x", "a": [1, 2]}])
    with pytest.raises(UserError, match=r"d\.jsonl:1: 'a' must be a string or a number"):
        load_task(TaskConfig(name="jsonl", path=str(path), prompt_key="q", answer_key="a"))
    path = _write_jsonl(tmp_path / "e.jsonl", ["just a string"])
    with pytest.raises(UserError, match=r"e\.jsonl:1: expected a JSON object"):
        load_task(TaskConfig(name="jsonl", path=str(path)))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(UserError, match=r"empty\.jsonl: no examples"):
        load_task(TaskConfig(name="jsonl", path=str(empty)))
    with pytest.raises(UserError, match="no such file"):
        load_task(TaskConfig(name="jsonl", path=str(tmp_path / "nope.jsonl")))
    with pytest.raises(UserError, match="task.path is required"):
        load_task(TaskConfig(name="parquet"))


def test_too_few_rows_for_val(tmp_path):
    path = _write_jsonl(tmp_path / "d.jsonl", _rows(5))
    with pytest.raises(UserError, match="num_val=5"):
        load_task(TaskConfig(name="jsonl", path=str(path), prompt_key="q", answer_key="a", num_val=5))


def test_parquet_round_trip(tmp_path):
    df = pd.DataFrame({"prompt": [f"p{i}" for i in range(20)], "answer": [str(i) for i in range(20)]})
    path = tmp_path / "d.parquet"
    df.to_parquet(path)
    task = load_task(TaskConfig(name="parquet", path=str(path), num_train=100, num_val=4, checker="exact"))
    got = {ex.prompt: ex.answer for ex in task.train + task.val}
    assert got == dict(zip(df.prompt, df.answer))
    assert all(ex.prompt == f"p{ex.id}" for ex in task.val)  # id = the row number
    assert task.checker_name == "exact"


def test_parquet_errors_name_file_column_and_row(tmp_path):
    path = tmp_path / "d.parquet"
    pd.DataFrame({"question": ["a", "b"], "answer": ["1", "2"]}).to_parquet(path)
    with pytest.raises(UserError, match=r"d\.parquet: missing column\(s\) 'prompt'"):
        load_task(TaskConfig(name="parquet", path=str(path)))
    pd.DataFrame({"prompt": ["a", None], "answer": ["1", "2"]}).to_parquet(path)
    with pytest.raises(UserError, match=r"d\.parquet: row 1: 'prompt' must be a non-empty string"):
        load_task(TaskConfig(name="parquet", path=str(path)))
    empty = tmp_path / "e.parquet"
    pd.DataFrame({"prompt": pd.Series([], dtype=str), "answer": pd.Series([], dtype=str)}).to_parquet(empty)
    with pytest.raises(UserError, match=r"e\.parquet: no examples"):
        load_task(TaskConfig(name="parquet", path=str(empty)))
    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet")
    with pytest.raises(UserError, match=r"junk\.parquet: cannot read as Parquet"):
        load_task(TaskConfig(name="parquet", path=str(junk)))


CASES = [
    ("0.5", "\\frac{1}{2}", True),
    ("\\frac{1}{2}", "0.5", True),
    ("The answer is $\\boxed{\\frac{1}{2}}$.", "1/2", True),
    ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", True),
    ("the answer is 3", "4", False),
    ("no idea", "4", False),
    ("", "4", False),
]


@pytest.mark.parametrize("completion,answer,expected", CASES)
def test_math_checker(completion, answer, expected):
    assert math_checker(completion, answer) is expected


def test_math_checker_non_math_gold_falls_back_to_exact():
    assert math_checker(" yes ", "yes")
    assert not math_checker("no", "yes")


def test_math_checker_works_off_the_main_thread():
    results: list = []

    def work():
        try:
            results.append([math_checker(c, a) for c, a, _ in CASES])
        except Exception as e:  # noqa: BLE001 - surfaced by the assertion below
            results.append(e)

    t = threading.Thread(target=work)
    t.start()
    t.join(timeout=60)
    assert results == [[expected for _, _, expected in CASES]]
