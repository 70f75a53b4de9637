"""A user's own model folder and data, built offline for tests: a tiny random Qwen2-style folder
(tiny_hf.py: BPE tokenizer, ChatML template, 256 positions) and a question/answer JSONL.

    root = own_model_and_data(tmp_path, [{"question": "1+1=", "answer": "2"}, ...])
    # root / "qwen" (model.path), root / "data.jsonl" (task.path, prompt_key: question)
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.tiny_hf import build_tiny_hf


def own_model_and_data(root: Path, rows: list[dict]) -> Path:
    """Write `rows` to root/data.jsonl and a tiny Qwen2 folder whose BPE is trained on them to root/qwen."""
    root = Path(root)
    (root / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    build_tiny_hf(root / "qwen", "qwen2", corpus=[r["question"] + r["answer"] for r in rows])
    return root
