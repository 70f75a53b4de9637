"""Errors a user can fix. The CLI prints them as one line and exits 2 (no traceback).

Raise `UserError` (a ValueError, so library callers can catch ValueError) for bad input:
files, columns, values, config keys. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(ValueError):
    """Bad input the user can fix; the message names the problem."""
