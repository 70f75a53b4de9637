"""Where the answer sits in a completion: the answer formats of `task.answer_format`.

    find_answer("so 3 + 4 = 7. #### 7", "hash")            # -> "7"
    find_answer("<answer> (1 + 2) * 3 </answer>", "answer_tag")   # -> "(1 + 2) * 3"
    follows_format("I think 12", "boxed")                 # -> False

    last_number   the last number in the text ("1,000" -> "1000", "-2.50" -> "-2.5")
    boxed         the content of the last \\boxed{...} (nested braces kept)
    hash          the text after the last "#### " (GSM8K's convention), to the end of its line
    answer_tag    the content of the last <answer>...</answer>

An answer that is a plain number is written canonically (commas dropped, "12.0" -> "12"), so an
exact comparison with a numeric answer does not fail on its spelling. No answer found is None.
The task checkers (workbench.tasks) and the shipped format reward (workbench.rl.reward_functions) both
read the formats here: one definition of "the answer follows the format".
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Optional

ANSWER_FORMATS = ("last_number", "boxed", "hash", "answer_tag")

# What a prompt asks for, per format (the synthetic chat families append it to their prompts).
INSTRUCTIONS = {
    "last_number": "End your reply with the answer as a number.",
    "boxed": "Put the final answer in \\boxed{}.",
    "hash": "End your reply with a line '#### ' followed by the answer.",
    "answer_tag": "Give the final answer in <answer> </answer> tags.",
}

_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|-?\.\d+")
_PLAIN_NUMBER = re.compile(r"-?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?\.?|\.\d+)")  # ".5" too: _NUMBER finds it
_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_HASH = re.compile(r"####[ \t]*([^\n]*)")


def canonical_number(text: str) -> Optional[str]:
    """`text` as a canonical number ("1,000" -> "1000", "2.50" -> "2.5", "3." -> "3"), or None
    when it is not a plain number."""
    t = text.strip()
    if not _PLAIN_NUMBER.fullmatch(t):
        return None
    try:
        d = Decimal(t.rstrip(".").replace(",", ""))
    except InvalidOperation:
        return None
    # Decimal formatting throughout: str(int(d)) raises past 4300 digits (a degenerate "1111..."
    # completion would stop the run) and normalize() rounds to 28 digits
    if d == d.to_integral_value():
        return "0" if d == 0 else format(d.to_integral_value(), "f")
    return format(d, "f").rstrip("0")


def _last_boxed(text: str) -> Optional[str]:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i, depth = start + len("\\boxed{"), 1
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None  # unbalanced: the box was never closed


def find_answer(text: str, fmt: str) -> Optional[str]:
    """The answer `text` gives in format `fmt` (one of ANSWER_FORMATS), stripped and, when it is a
    plain number, canonical; None when there is none (or it is empty)."""
    if fmt == "last_number":
        found = _NUMBER.findall(text)
        raw = found[-1] if found else None
    elif fmt == "boxed":
        raw = _last_boxed(text)
    elif fmt == "hash":
        found = _HASH.findall(text)
        raw = found[-1] if found else None
    elif fmt == "answer_tag":
        found = _TAG.findall(text)
        raw = found[-1] if found else None
    else:
        raise ValueError(f"unknown answer format {fmt!r} (one of {', '.join(ANSWER_FORMATS)})")
    if raw is None or not raw.strip():
        return None
    return canonical_number(raw) or raw.strip()


def follows_format(text: str, fmt: str) -> bool:
    """Whether `text` gives an answer in format `fmt` (whatever the answer)."""
    return find_answer(text, fmt) is not None


def written_answer(answer: str, fmt: str) -> str:
    """`answer` written the way format `fmt` asks (a known-good completion's answer)."""
    return {"last_number": answer, "boxed": f"\\boxed{{{answer}}}", "hash": f"#### {answer}",
            "answer_tag": f"<answer>{answer}</answer>"}[fmt]  # fmt: skip
