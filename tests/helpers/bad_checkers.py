"""Checkers for failure tests; importable by Ray workers through PYTHONPATH (see conftest)."""


def raising(completion: str, answer: str) -> bool:
    raise RuntimeError("verifier crashed")


def raising_in_workers(completion: str, answer: str) -> bool:
    """Correct in the driver (so the warm-up passes), crashes inside Ray actors."""
    with open("/proc/self/cmdline", "rb") as fh:
        if fh.read().startswith(b"ray::"):
            raise RuntimeError("verifier crashed")
    return completion.strip() == answer.strip()


def _actor_role() -> bytes:
    """b"Generator", b"Evaluator", ... inside a Ray actor (its process title), b"" elsewhere."""
    with open("/proc/self/cmdline", "rb") as fh:
        title = fh.read()
    return title[5:].split(b".")[0].split(b"\0")[0] if title.startswith(b"ray::") else b""


_calls = {"n": 0}


def gives_up_mid_run(completion: str, answer: str) -> bool:
    """Exact match, until its 40th call inside a Ray actor: then a UserError, as a verifier that
    runs out of something mid-run would raise (the run must show that one line)."""
    if _actor_role():
        _calls["n"] += 1
        if _calls["n"] > 40:
            from workbench.errors import UserError

            raise UserError("the test verifier gave up after 40 checks")
    return completion.strip() == answer.strip()


def never_passes(completion: str, answer: str) -> bool:
    """A checker no completion passes (a wrong answer format, a checker too strict)."""
    return False


def __getattr__(name: str):
    """`refused_in_generators`: a checker the driver and the coordinator import, but whose import
    fails with a UserError in the generator and evaluator constructors (an error only an actor sees)."""
    if name == "refused_in_generators":
        if _actor_role() in (b"Generator", b"Evaluator"):
            from workbench.errors import UserError

            raise UserError("this checker cannot run in a generator (test: an error in an actor's constructor)")
        return never_passes
    raise AttributeError(name)
