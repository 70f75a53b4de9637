"""`task.name: hf`: datasets read offline by the real `datasets` library, in the formats it reads.

A folder of train.parquet + test.parquet (the splits train and test), a folder whose README names
configurations (as openai/gsm8k's does), a single JSONL file, a `save_to_disk` DatasetDict; GSM8K's
"#### 72" answers through `answer_regex`, MATH's \\boxed{} solutions through math-verify; each bad
input one line; `workbench check` on the task.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from tests.helpers.hub_cache import offline_hub
from workbench.cli import main
from workbench.config import run_config_from_dict
from workbench.errors import UserError
from workbench.tasks.base import load_task
from workbench.tasks.mixture import absolute_mix

GSM = "#### *(.+)"


def gsm_rows(n: int, start: int = 0) -> list[dict]:
    return [{"question": f"Tom has {i} apples and buys {i + 1}. How many?", "answer": f"{i} + {i + 1} = <<>>\n#### {2 * i + 1}"}
            for i in range(start, start + n)]  # fmt: skip


@pytest.fixture
def offline(monkeypatch, tmp_path):
    offline_hub(monkeypatch, tmp_path / "hf")  # the datasets cache in the temp dir, the hub unreachable


@pytest.fixture
def gsm_folder(tmp_path, offline):
    d = tmp_path / "gsm"
    d.mkdir()
    pd.DataFrame(gsm_rows(30)).to_parquet(d / "train.parquet")
    pd.DataFrame(gsm_rows(8, start=100)).to_parquet(d / "test.parquet")
    return d


def task_cfg(path, **kw):
    base = {"name": "hf", "path": str(path), "prompt_key": "question", "answer_key": "answer", "answer_regex": GSM,
            "num_val": 5, "num_train": 1000}  # fmt: skip
    return run_config_from_dict({"task": base | kw, "eval": {"num_prompts": 5}}).task


def test_a_parquet_folder_gives_its_splits_and_answer_regex_takes_the_answer(gsm_folder):
    task = load_task(task_cfg(gsm_folder, split="train", val_split="test"))
    assert len(task.train) == 30 and len(task.val) == 5 and task.checker_name == "math"
    by_prompt = {ex.prompt: ex for ex in task.train + task.val}
    assert by_prompt["Tom has 3 apples and buys 4. How many?"].answer == "7"
    assert all(ex.prompt.startswith("Tom has 1") for ex in task.val)  # validation from the test split
    assert len({ex.id for ex in task.train + task.val}) == 35 and min(ex.id for ex in task.val) >= 30
    assert task.checker("So he has 7 apples. The answer is 7.", "7") and not task.checker("The answer is 8", "7")
    held = load_task(task_cfg(gsm_folder, split="train"))  # no val_split: num_val rows held out of train
    assert len(held.val) == 5 and len(held.train) == 25 and not {e.prompt for e in held.val} & {e.prompt for e in held.train}


def test_reward_functions_get_the_answer_that_answer_regex_took(gsm_folder):
    # TRL's GSM8K recipes map the dataset so `answer` is "7", not the worked solution ending "#### 7";
    # with answer_regex doing that mapping here, a reward function written for them must see "7"
    from workbench.tasks.chat import reward_inputs

    task = load_task(task_cfg(gsm_folder, split="train", val_split="test"))
    ex = next(ex for ex in task.train if ex.prompt == "Tom has 3 apples and buys 4. How many?")
    _, _, columns = reward_inputs([task], [ex], ["The answer is 7"])
    assert columns["answer"] == ["7"]


def test_readme_configurations_a_jsonl_file_and_a_saved_datasetdict(tmp_path, offline):
    import datasets

    d = tmp_path / "gsm8k"
    for config, start in (("main", 0), ("socratic", 50)):
        (d / config).mkdir(parents=True)
        pd.DataFrame(gsm_rows(12, start)).to_parquet(d / config / "train-00000-of-00001.parquet")
        pd.DataFrame(gsm_rows(6, start + 20)).to_parquet(d / config / "test-00000-of-00001.parquet")
    card = {"configs": [{"config_name": c, "data_files": [{"split": s, "path": f"{c}/{s}-*"} for s in ("train", "test")]}
                        for c in ("main", "socratic")]}  # fmt: skip
    (d / "README.md").write_text(f"---\n{yaml.safe_dump(card)}---\n# a GSM8K-shaped dataset\n")
    socratic = load_task(task_cfg(d, config="socratic", val_split="test"))
    assert {ex.answer for ex in socratic.train} == {str(2 * i + 1) for i in range(50, 62)}
    with pytest.raises(UserError, match=r"^task.config: .*main.*socratic"):
        load_task(task_cfg(d))  # two configurations and none named
    f = tmp_path / "rows.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in gsm_rows(10)))
    assert len(load_task(task_cfg(f)).train) == 5  # one file is the split "train"
    saved = tmp_path / "saved"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(gsm_rows(9)),
                          "validation": datasets.Dataset.from_list(gsm_rows(4, 40))}).save_to_disk(str(saved))  # fmt: skip
    task = load_task(task_cfg(saved, val_split="validation", num_val=4))
    assert (len(task.train), sorted(ex.answer for ex in task.val)) == (9, ["81", "83", "85", "87"])


def test_math_style_boxed_solutions_go_through_math_verify(tmp_path, offline):
    rows = [{"problem": f"Compute {i}/2.", "solution": f"Halve it: $\\boxed{{\\frac{{{i}}}{{2}}}}$."} for i in range(1, 9)]
    pd.DataFrame(rows).to_parquet(tmp_path / "train.parquet")
    task = load_task(task_cfg(tmp_path, prompt_key="problem", answer_key="solution", answer_regex=None, num_val=2))
    ex = next(e for e in task.train + task.val if e.prompt == "Compute 3/2.")
    assert ex.answer == rows[2]["solution"]  # the whole solution: math-verify finds the boxed answer
    assert task.checker("so the answer is 1.5", ex.answer) and not task.checker("the answer is 3", ex.answer)


@pytest.mark.parametrize("kw,needle", [
    ({"split": "val"}, "task.split: 'val' is not a split of"),
    ({"val_split": "dev"}, "task.val_split: 'dev' is not a split of"),
    ({"prompt_key": "problem"}, "task.prompt_key: 'problem' is not a column of"),
    ({"answer_key": "solution"}, "task.answer_key: 'solution' is not a column of"),
    ({"answer_regex": "ANSWER: (\\d+)"}, "task.answer_regex: 'ANSWER: (\\\\d+)' matches no row's 'answer'"),
    ({"answer_regex": "#### (+"}, "task.answer_regex: '#### (+' is not a valid regex"),
    ({"path": "Org/no-such-dataset"}, "task.path: 'Org/no-such-dataset' is no local folder or file, and not in the datasets cache"),
    ({"path": None}, "task.path is required for task.name='hf'"),
])  # fmt: skip
def test_bad_input_is_one_line(gsm_folder, kw, needle):
    cfg = task_cfg(gsm_folder, val_split="test")
    cfg = type(cfg)(**{**cfg.__dict__, **kw})
    with pytest.raises(UserError) as e:
        load_task(cfg)
    assert needle in str(e.value) and "\n" not in str(e.value)
    if "split" in kw or "val_split" in kw:
        assert "(its splits: train, test)" in str(e.value)


def test_a_hub_dataset_id_stays_an_id_in_a_mix(tmp_path):
    hub, local = run_config_from_dict({"task": {"mix": [
        {"name": "hf", "path": "openai/gsm8k", "config": "main", "domain": "gsm8k"},
        {"name": "hf", "path": str(tmp_path)}]}}).task.mix  # fmt: skip
    assert [s.path for s in absolute_mix([hub, local])] == ["openai/gsm8k", str(tmp_path)]


def test_workbench_check_scores_an_hf_task_by_row(gsm_folder, tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"task": task_cfg(gsm_folder, val_split="test", num_val=8).__dict__ | {"mix": []},
                                   "eval": {"num_prompts": 5}}))  # fmt: skip
    comp = tmp_path / "c.jsonl"
    lines = [{"example": 3, "completion": "3 + 4 = 7, so 7"}, {"example": 30 + 2, "completion": "205"}, {"example": 0, "completion": "2"}]
    comp.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert main(["check", "--config", str(cfg), "--completions", str(comp), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["example"], r["domain"], r["verdict"]) for r in rows] == [(3, "hf", "pass"), (32, "hf", "pass"), (0, "hf", "fail")]
