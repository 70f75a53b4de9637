"""The `pyexpr` code family: seeded problems whose checks run in the sandbox."""

from __future__ import annotations

import json

import pytest

from workbench.errors import UserError
from workbench.tasks.base import check_batch
from workbench.tasks.codegen import make_code_task
from workbench.tasks.sandbox import LocalSandbox


def test_problems_are_seeded_distinct_and_their_references_pass_in_the_sandbox():
    a = make_code_task("pyexpr", 1, num_train=300, num_val=50, seed=0)
    b = make_code_task("pyexpr", 1, num_train=300, num_val=50, seed=0)
    assert [ex.prompt for ex in a.train] == [ex.prompt for ex in b.train]
    prompts = [ex.prompt for ex in a.train + a.val]
    assert len(set(prompts)) == len(prompts)
    assert a.sandboxed and a.checker_name == "code"
    spec = json.loads(a.val[0].answer)
    assert spec["form"] == "call" and spec["entry_point"] == "f" and len(spec["cases"]) == 5
    products = make_code_task("pyexpr", 2, num_train=10, num_val=50, seed=0)
    with LocalSandbox(workers=1) as sb:
        for task in (a, products):
            verdicts = check_batch(task, [ex.reference for ex in task.val], task.val, sandbox=sb)
            assert all(v.passed for v in verdicts)


def test_equivalent_expressions_pass_and_ones_that_fit_only_the_shown_pairs_fail():
    task = make_code_task("pyexpr", 1, num_train=300, num_val=50, seed=1)
    ex = next(e for e in task.val if e.reference.startswith("x+"))
    c = int(ex.reference[2:])
    shown = ex.prompt.split(";")[:2]  # f(a)=b pairs
    table = {int(p[2 : p.index(")")]): int(p.split("=")[1]) for p in shown}
    lookup = "{" + ",".join(f"{k}:{v}" for k, v in table.items()) + "}[x]"  # right on the shown inputs only
    with LocalSandbox(workers=1) as sb:
        verdicts = check_batch(task, [f"{c}+x", f"x+{c - 1}+1", lookup, "x*0"], [ex] * 4, sandbox=sb)
    assert [v.verdict for v in verdicts[:2]] == ["pass", "pass"]
    assert verdicts[2].verdict in ("fail", "error") and verdicts[3].verdict == "fail"


def test_difficulty_adds_the_product_then_wider_inputs():
    ops = {d: {ex.reference[1] for ex in make_code_task("pyexpr", d, num_train=400, num_val=50, seed=0).train} for d in (1, 2, 3)}
    assert ops == {1: {"+", "-"}, 2: {"+", "-", "*"}, 3: {"+", "-", "*"}}
    inputs = {
        d: {int(p[2 : p.index(")")]) for ex in make_code_task("pyexpr", d, num_train=400, num_val=50, seed=0).train for p in ex.prompt.split(";")[:2]}
        for d in (2, 3)
    }
    assert max(inputs[2]) <= 9 and max(inputs[3]) >= 10


def test_bad_sizes_are_one_line():
    with pytest.raises(UserError, match="only 1620 distinct problems"):
        make_code_task("pyexpr", 1, num_train=1700, num_val=10, seed=0)
    with pytest.raises(UserError, match="only 2430 distinct problems"):
        make_code_task("pyexpr", 2, num_train=3000, num_val=10, seed=0)
    with pytest.raises(UserError, match="difficulty must be in 1..3"):
        make_code_task("pyexpr", 4, num_train=3, num_val=1, seed=0)
