"""Errors a user can fix. The CLI prints them as one line and exits 2 (no traceback).

Raise `UserError` (a ValueError, so library callers can catch ValueError) for bad input:
files, columns, values, config keys. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(ValueError):
    """Bad input the user can fix; the message names the problem."""


def one_line(e: BaseException) -> str:
    """`e`'s message on one line (a library's or a user's function's may span several); may be empty."""
    return " ".join(str(e).split())


def as_number(name: str, value: object, *, integer: bool = False) -> float:
    """`value` as a float (a whole number when `integer`), or a UserError naming the argument: the
    check every public function runs on numeric arguments a notebook user types."""
    import numbers

    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if ok and integer:
        ok = float(value).is_integer()
    if not ok:
        kind = "a whole number" if integer else "a number"
        raise UserError(f"{name} must be {kind}, got {value!r}")
    return float(value)
