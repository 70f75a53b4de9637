"""Code specs (what a code example's `Example.answer` holds), turning a completion into a program,
and judging the sandbox's raw output in OUR process.

    spec = code_spec(entry_point="add", cases=[{"args": [1, 2], "expected": 3}])      # function calls
    spec = code_spec(cases=[{"stdin": "1 2\\n", "stdout": "3\\n"}])                     # stdin/stdout
    spec = code_spec(entry_point="f", test="def check(candidate): ...", prefix=prompt)  # HumanEval
    program_from_completion(completion, spec)   # -> the Python source the sandbox runs

A completion becomes code like this: the first fenced block (```python, ```py or a bare ```) if
there is one, else the whole text; the spec's `prefix` (a HumanEval prompt) goes in front of it.

Who judges: for function-call and stdin/stdout specs the expected values never enter the sandbox.
The check prints each case's result (JSON) on a line tagged with a per-check random nonce; the
parent compares with `==` on plain JSON values here (floats within 1e-6 relative), stdout with
trailing whitespace ignored. So an early exit, a printed "pass", an always-true `__eq__` (not
JSON-serialisable) or a patched harness cannot pass. HumanEval specs are assert-style: the test
runs in a harness process of its own, and the completion's function is reached through a proxy
that passes plain data only (harness.py); the harness reports "ok", "fail" or "err".
"""

from __future__ import annotations

import json
import math
import re
import secrets
from typing import Any

from workbench.tasks.types import Verdict

FORMS = ("call", "stdio", "assert")
_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)


class SpecError(ValueError):
    """A spec that cannot be checked (the loader names file and row; a bad spec at check time is an error verdict)."""


def code_spec(*, cases: list[dict] | None = None, entry_point: str | None = None, test: str | None = None,
              prefix: str = "") -> str:
    """The canonical JSON spec of one code example. The form follows from the arguments:
    `test` + `entry_point` -> HumanEval assert form; `entry_point` + cases with "args"/"expected" ->
    function calls; cases with "stdin"/"stdout" -> a program reading stdin. Raises SpecError."""
    if test is not None:
        if not entry_point or not isinstance(test, str):
            raise SpecError("a HumanEval-style test needs a string 'test' and an 'entry_point'")
        return json.dumps({"form": "assert", "entry_point": entry_point, "test": test, "prefix": prefix})
    if not cases:
        raise SpecError("no test cases (give 'cases', or 'test' + 'entry_point')")
    if not isinstance(cases, list) or not all(isinstance(c, dict) for c in cases):
        raise SpecError("'cases' must be a list of objects")
    if entry_point:
        return json.dumps({"form": "call", "entry_point": entry_point, "cases": [_call_case(c, i) for i, c in enumerate(cases)],
                           "prefix": prefix})
    return json.dumps({"form": "stdio", "cases": [_stdio_case(c, i) for i, c in enumerate(cases)], "prefix": prefix})


def _call_case(case: dict, i: int) -> dict:
    if "expected" not in case or not isinstance(case.get("args", []), list) or not isinstance(case.get("kwargs", {}), dict):
        raise SpecError(f"case {i}: a function-call case is {{'args': [...], 'expected': value}} (optional 'kwargs': {{}})")
    out = {"args": case.get("args", []), "kwargs": case.get("kwargs", {}), "expected": case["expected"]}
    try:
        json.dumps(out, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise SpecError(f"case {i} is not JSON-serialisable ({e})") from None
    return out


def _stdio_case(case: dict, i: int) -> dict:
    if not isinstance(case.get("stdin"), str) or not isinstance(case.get("stdout"), str):
        raise SpecError(f"case {i}: a stdin/stdout case is {{'stdin': str, 'stdout': str}} (or give 'entry_point' for function calls)")
    return {"stdin": case["stdin"], "stdout": case["stdout"]}


def parse_spec(spec: str) -> dict:
    try:
        obj = json.loads(spec)
    except (TypeError, json.JSONDecodeError):
        raise SpecError("the answer is not a code spec (JSON from code_spec)") from None
    if not isinstance(obj, dict) or obj.get("form") not in FORMS:
        raise SpecError(f"unknown code spec form {obj.get('form') if isinstance(obj, dict) else obj!r}")
    return obj


def program_from_completion(completion: str, spec: dict) -> str:
    """The source the sandbox runs: the first fenced block, else the whole completion, after the prefix."""
    m = _FENCE.search(completion)
    code = m.group(1) if m else completion
    prefix = spec.get("prefix", "")
    return prefix + ("\n" if m and prefix else "") + code


def request(check_spec: dict, completion: str, rid: int) -> dict:
    """The fork server's request for one check (with a fresh nonce): expected values stay here.
    Part "a" goes to the completion's process; for the assert form, part "b" (the test, the
    prompt's prefix, the nonce) goes to the harness's process only (harness.py)."""
    nonce, code = secrets.token_hex(12), program_from_completion(completion, check_spec)
    form, entry = check_spec["form"], check_spec.get("entry_point")
    if form == "assert":
        return {"id": rid, "a": {"mode": "serve", "code": code, "entry_point": entry},
                "b": {"nonce": nonce, "test": check_spec["test"], "prefix": check_spec.get("prefix", ""), "entry_point": entry}}
    if form == "call":
        inputs: list = [{"args": c["args"], "kwargs": c["kwargs"]} for c in check_spec["cases"]]
    else:
        inputs = [c["stdin"] for c in check_spec["cases"]]
    return {"id": rid, "a": {"mode": form, "nonce": nonce, "code": code, "entry_point": entry, "inputs": inputs}}


def nonce_of(req: dict) -> str:
    """The check's nonce: the harness's for the assert form, else the completion process's."""
    return (req.get("b") or req["a"])["nonce"]


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, float) or isinstance(got, float):
        return (isinstance(got, (int, float)) and isinstance(want, (int, float)) and not isinstance(got, bool)
                and not isinstance(want, bool) and math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9))
    if isinstance(want, list) and isinstance(got, list):
        return len(got) == len(want) and all(_same(g, w) for g, w in zip(got, want))
    if isinstance(want, dict) and isinstance(got, dict):
        return got.keys() == want.keys() and all(_same(got[k], want[k]) for k in want)
    return type(got) is type(want) and got == want


def _stdout_same(got: str, want: str) -> bool:
    norm = lambda s: [line.rstrip() for line in s.rstrip().splitlines()]  # noqa: E731
    return norm(got) == norm(want)


def _results(out: str, nonce: str) -> list[dict]:
    rows = []
    for line in out.splitlines():
        if line.startswith(nonce + " "):
            try:
                row = json.loads(line[len(nonce) + 1:])
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


def judge(check_spec: dict, req: dict, resp: dict, cpu_limit: float) -> Verdict:
    """The verdict of one check from the fork server's response (status, cpu, captured output)."""
    cpu, status = float(resp.get("cpu", 0.0)), resp.get("status")
    if status == "output":
        return Verdict("error", cpu, "output over the sandbox's limit")
    # SIGKILL of the check itself: only the RLIMIT_CPU hard limit sends it (PID 1 of its namespace
    # ignores its own processes' SIGKILL; the server's kills are "wall" / "output")
    if status == "wall":
        return Verdict("timeout", cpu, "wall-time backstop")
    if status == "memory":
        return Verdict("error", cpu, "over the memory limit (all the check's processes together)")
    if cpu >= cpu_limit or status == "cpu" or (status == "killed" and resp.get("rc") == -9):
        return Verdict("timeout", cpu, f"over {cpu_limit:g} CPU seconds")
    if resp.get("rc") == 99 and resp.get("out", "").startswith("sandbox:"):
        return Verdict("sandbox_error", cpu, resp["out"][:200])
    rows = _results(resp.get("out", ""), nonce_of(req))
    if status == "killed" and not rows:
        return Verdict("error", cpu, f"killed by signal {-int(resp.get('rc', 0))} (a limit: memory, processes, files)")
    head = [r for r in rows if "i" not in r]
    if head and "err" in head[0]:
        return Verdict("error", cpu, head[0]["err"])
    if check_spec["form"] == "assert":
        if head and "fail" in head[0]:
            return Verdict("fail", cpu, head[0]["fail"])
        ok = bool(head) and head[0].get("ok") is True and status == "exited"
        return Verdict("pass", cpu) if ok else Verdict("error", cpu, "the test did not report (the program exited early?)")
    return _judge_cases(check_spec, rows, cpu, status)


def _judge_cases(check_spec: dict, rows: list[dict], cpu: float, status: str) -> Verdict:
    by_case = {r["i"]: r for r in rows if isinstance(r.get("i"), int)}
    for i, case in enumerate(check_spec["cases"]):
        row = by_case.get(i)
        if row is None:
            return Verdict("error", cpu, f"case {i}: no result (the program exited early or was killed: {status})")
        if "err" in row and check_spec["form"] == "call":
            return Verdict("error", cpu, f"case {i}: {row['err']}")
        if check_spec["form"] == "call":
            try:
                got = json.loads(row.get("r", ""))
            except json.JSONDecodeError:
                return Verdict("error", cpu, f"case {i}: unreadable result")
            if not _same(got, case["expected"]):
                return Verdict("fail", cpu, f"case {i}: got {row.get('r', '')[:60]}, expected {json.dumps(case['expected'])[:60]}")
        else:
            if "err" in row:
                return Verdict("error", cpu, f"case {i}: {row['err']}")
            if not isinstance(row.get("out"), str) or not _stdout_same(row["out"], case["stdout"]):
                return Verdict("fail", cpu, f"case {i}: wrong output {str(row.get('out'))[:60]!r}")
    return Verdict("pass", cpu)
