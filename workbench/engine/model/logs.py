"""Keep logs readable: no per-actor Hugging Face progress bars or info chatter.

    quiet_hf()                    # a worker process: errors only, no bars, offline, for good
    with no_progress_bars(): ...  # a driver: no per-shard bars while loading a small model
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator


def quiet_hf() -> None:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


@contextmanager
def no_progress_bars() -> Iterator[None]:
    """No 'Loading weights' bars from transformers inside the block (restored after it)."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()
