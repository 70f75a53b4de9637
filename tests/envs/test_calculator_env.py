"""workbench/envs/calculator.py: a TRL-shaped tool environment and its word problems. Used as TRL
uses it (a fresh instance, reset(**row), its methods called as tools, get_reward), then through the
episode driver."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from tests.tasks.env.env_helpers import QWEN_LIKE, tiny_tokenizer
from workbench.envs.calculator import CalculatorEnv, make_rows, write_jsonl
from workbench.tasks.env import EnvSettings, EpisodeRunner, load_env_factory


def test_the_tools_compute_and_the_reward_reads_the_submitted_answer():
    env = CalculatorEnv()
    assert env.reset(**{"prompt": "What is 47 + 38?", "answer": 85, "kind": "sum"}) is None
    assert env.add(47, 38) == 85 and env.multiply(47, 3) == 141 and env.subtract(90, 5) == 85
    assert env.get_reward() == 0.0  # nothing submitted
    env.submit(84)
    assert env.get_reward() == 0.0
    env.submit(85)
    assert env.get_reward() == 1.0
    env.reset(answer="141")  # a JSONL column may hold the answer as text
    assert env.submitted is None and env.expected == 141


def test_each_instance_keeps_its_own_episode():
    a, b = CalculatorEnv(), CalculatorEnv()
    a.reset(answer=10)
    b.reset(answer=20)
    a.submit(10)
    assert a.get_reward() == 1.0 and b.get_reward() == 0.0


def test_the_rows_are_two_digit_sums_and_a_two_digit_number_times_a_digit():
    rows = make_rows(200, seed=3)
    assert rows == make_rows(200, seed=3) and rows != make_rows(200, seed=4)
    assert {r["kind"] for r in rows} == {"sum", "times"}
    for r in rows:
        nums = [int(x) for x in re.findall(r"\d+", r["prompt"])]
        assert len(nums) == 2 and r["prompt"].endswith("then call submit with the answer.")
        if r["kind"] == "sum":
            assert all(10 <= n <= 99 for n in nums) and r["answer"] == sum(nums)
        else:
            assert 10 <= nums[0] <= 99 and 2 <= nums[1] <= 9 and r["answer"] == nums[0] * nums[1]


def test_the_jsonl_writer_and_its_command(tmp_path):
    path = write_jsonl(tmp_path / "calc.jsonl", 10, seed=1)
    assert [json.loads(line) for line in path.read_text().splitlines()] == make_rows(10, seed=1)
    out = tmp_path / "cli.jsonl"
    subprocess.run([sys.executable, "-m", "workbench.envs.calculator", str(out), "6", "1"], check=True, capture_output=True)
    assert out.read_text() == write_jsonl(tmp_path / "again.jsonl", 6, seed=1).read_text()


def test_the_module_is_plain_python_a_trl_user_could_write():
    source = open(sys.modules[CalculatorEnv.__module__].__file__).read()
    assert "import workbench" not in source and "from workbench" not in source


def test_an_episode_through_the_driver_passes_when_it_submits_the_sum():
    tok = tiny_tokenizer(QWEN_LIKE)
    row = make_rows(1, seed=0)[0]
    a, b = re.findall(r"\d+", row["prompt"])
    replies = iter([
        '<tool_call>\n{"name": "add", "arguments": {"a": %s, "b": %s}}\n</tool_call>' % (a, b),
        '<tool_call>\n{"name": "submit", "arguments": {"answer": %d}}\n</tool_call>' % row["answer"],
        "Done.",
    ])

    def sample(ids, max_new):
        out = tok.encode(next(replies), add_special_tokens=False) + [tok.eos_token_id]
        return out, [0.0] * len(out)

    ep = EpisodeRunner(load_env_factory("workbench.envs.calculator:CalculatorEnv"), tok, EnvSettings()).run(row, sample)
    assert ep.error is None and ep.passed and ep.tool_results[0].content == str(int(a) + int(b))


def test_few_shot_rows_lead_with_worked_episodes_whose_calls_parse_and_add_up(tmp_path):
    from workbench.envs.calculator import few_shot_messages
    from workbench.tasks.env.tools import parse_reply, run_tool

    plain, rows = make_rows(6, seed=2), make_rows(6, seed=2, few_shot=True)
    shots = few_shot_messages()
    env = load_env_factory("workbench.envs.calculator:CalculatorEnv")
    for p, r in zip(plain, rows):  # the same question and answer, after the same worked episodes
        assert r["prompt"][:-1] == shots and r["prompt"][-1] == {"role": "user", "content": p["prompt"]}
        assert (r["answer"], r["kind"]) == (p["answer"], p["kind"])
    assert [m["role"] for m in shots] == ["user", "assistant"] * 6
    instance = env.new()
    tools = env.bound_tools(instance)
    for i in range(0, len(shots), 6):  # each shot: a tool call whose result is the next turn, then submit it
        (call,) = parse_reply(shots[i + 1]["content"], env.schemas).calls
        result = run_tool(tools, call, schemas=env.schemas).content
        assert shots[i + 2]["content"] == f"<tool_response>\n{result}\n</tool_response>"
        (submit,) = parse_reply(shots[i + 3]["content"], env.schemas).calls
        assert submit.name == "submit" and submit.arguments == {"answer": int(result)}
    out = tmp_path / "few.jsonl"
    subprocess.run([sys.executable, "-m", "workbench.envs.calculator", str(out), "4", "2", "--few-shot"], check=True, capture_output=True)
    assert [json.loads(line) for line in out.read_text().splitlines()] == make_rows(4, seed=2, few_shot=True)
