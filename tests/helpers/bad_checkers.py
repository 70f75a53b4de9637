"""Checkers for failure tests; importable by Ray workers through PYTHONPATH (see conftest)."""


def raising(completion: str, answer: str) -> bool:
    raise RuntimeError("verifier crashed")


def raising_in_workers(completion: str, answer: str) -> bool:
    """Correct in the driver (so the warm-up passes), crashes inside Ray actors."""
    with open("/proc/self/cmdline", "rb") as fh:
        if fh.read().startswith(b"ray::"):
            raise RuntimeError("verifier crashed")
    return completion.strip() == answer.strip()
