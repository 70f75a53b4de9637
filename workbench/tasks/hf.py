"""`task.name: hf`: a dataset read by `datasets` (a hub id, a local folder or file, a saved DatasetDict).

    task:
      name: hf
      path: openai/gsm8k          # or data/ (train.parquet + test.parquet), data.jsonl, a save_to_disk folder
      config: main                # load_dataset's name (null: the dataset's only configuration)
      split: train                # the training prompts
      val_split: test             # the validation prompts (null: task.num_val rows held out of split)
      prompt_key: question
      answer_key: answer
      answer_regex: '#### *(.+)'  # the answer is the first group's text (GSM8K's "#### 72" -> "72")

    task = load_task(cfg.task)    # workbench.tasks.base dispatches here; the checker is math-verify

`path` goes to `datasets.load_dataset` (its cache and HF_HOME / HF_HUB_OFFLINE / HF_TOKEN are the
user's own): a hub dataset id, or a local folder whose files it reads (one split per file name,
`train.parquet` -> train) or a README's `configs:`. A single .jsonl / .json / .parquet / .csv file
is one split, `train`. A folder written by `save_to_disk` goes to `datasets.load_from_disk`.
Every process that loads the task (the driver, each actor) reads it through its own node's cache:
pin `task.revision` on a multi-node cluster so every node reads the same revision.

Without `answer_regex` the answer column is the answer: MATH-style solutions with `\\boxed{}`
go to math-verify as they are, which finds the boxed answer. With it, rows whose answer text it
does not match are skipped (a warning says how many); a regex that matches no row is refused.
Reward functions then get the answer it took in the answer column ("72", as TRL's GSM8K recipes
map it), not the whole solution.
Bad input is one UserError line: an unknown dataset or configuration, a missing split or
column, a bad regex.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Optional

from workbench.errors import UserError, one_line
from workbench.tasks.files import Row, record, task_from_rows
from workbench.tasks.types import TaskData

log = logging.getLogger(__name__)
# load_dataset's builder for a single local file, by suffix
FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}


def task_path(path: Optional[str]) -> Optional[str]:
    """`path` made absolute when it is a local file or folder (Ray workers do not share the driver's
    working directory); a hub id (no such local path) is left as it is."""
    if not path:
        return path
    p = Path(path).expanduser()
    return str(p.resolve()) if p.exists() or path.startswith(("/", ".", "~")) else path


def load_splits(cfg: Any) -> dict[str, Any]:
    """{split name: Dataset} of `cfg.path` (see the module docstring for what it may be)."""
    import datasets
    from datasets.exceptions import DataFilesNotFoundError, DatasetNotFoundError
    from datasets.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    p = Path(cfg.path).expanduser()
    quiet = are_progress_bars_disabled()
    disable_progress_bars()  # "Generating train split" bars from every actor that loads the task
    try:
        if p.is_dir() and ((p / "dataset_dict.json").is_file() or (p / "state.json").is_file()):
            loaded = datasets.load_from_disk(str(p))
        elif p.is_file():
            if p.suffix not in FILE_BUILDERS:
                raise UserError(f"task.path: {p} is no file load_dataset reads (use {', '.join(FILE_BUILDERS)}) or a folder")
            loaded = datasets.load_dataset(FILE_BUILDERS[p.suffix], data_files={"train": str(p)})
        else:
            loaded = datasets.load_dataset(cfg.path, name=cfg.config, revision=cfg.revision)
    except (DatasetNotFoundError, DataFilesNotFoundError, FileNotFoundError) as e:
        raise UserError(f"task.path: {cfg.path!r} is no local folder or file, nor a dataset on the hub ({one_line(e) or type(e).__name__})") from None
    except ConnectionError as e:  # offline (HF_HUB_OFFLINE) or no network, and not in the datasets cache
        raise UserError(f"task.path: {cfg.path!r} is no local folder or file, and not in the datasets cache while the hub "
                        f"cannot be reached ({one_line(e) or type(e).__name__}): "
                        "load it once where there is a network with the same HF_HOME, or give a local folder") from None
    except ValueError as e:  # a configuration that is missing or unknown, a bad revision
        key = "task.config" if "onfig" in str(e) else "task.path"
        raise UserError(f"{key}: {cfg.path!r}: {one_line(e) or type(e).__name__}") from None
    finally:
        if not quiet:
            enable_progress_bars()
    return {"train": loaded} if isinstance(loaded, datasets.Dataset) else dict(loaded)


def split_of(splits: dict[str, Any], name: str, key: str, path: str) -> Any:
    if name not in splits:
        raise UserError(f"{key}: {name!r} is not a split of {path!r} (its splits: {', '.join(splits)})")
    return splits[name]


def answer_pattern(regex: Optional[str]) -> Optional[re.Pattern]:
    """`task.answer_regex` compiled (None stays None); a bad one is one line."""
    if regex is None:
        return None
    try:
        return re.compile(regex)
    except re.error as e:
        raise UserError(f"task.answer_regex: {regex!r} is not a valid regex ({e})") from None


def extract_answer(pattern: Optional[re.Pattern], text: str) -> Optional[str]:
    """The answer in `text`: its first group (or whole match) of `pattern`, stripped; None when it
    does not match. Without a pattern, the text itself."""
    if pattern is None:
        return text
    m = pattern.search(text)
    if m is None:
        return None
    return (m.group(1) if pattern.groups else m.group(0)).strip()


def _rows(ds: Any, cfg: Any, split: str, pattern: Optional[re.Pattern], offset: int) -> list[Row]:
    """The rows of one split (`files.record`: a prompt may be a message list); ids are row numbers + `offset` (unique across splits)."""
    where = f"{cfg.path} [{split}]"
    for key, name in (("task.prompt_key", cfg.prompt_key), ("task.answer_key", cfg.answer_key)):
        if name not in ds.column_names:
            raise UserError(f"{key}: {name!r} is not a column of {where} (columns: {', '.join(ds.column_names)})")
    rows, missed = [], 0
    for i, row in enumerate(ds):
        r = record(row, f"{where}: row {i}", cfg.prompt_key, cfg.answer_key, offset + i)
        answer = extract_answer(pattern, r.answer)
        if answer:  # reward functions see the answer taken, as TRL's GSM8K recipes map their `answer` column
            rows.append(r._replace(answer=answer, columns={**r.columns, cfg.answer_key: answer}))
        else:
            missed += 1
    if missed and not rows:
        first = str(ds[0][cfg.answer_key])[:80]
        raise UserError(f"task.answer_regex: {cfg.answer_regex!r} matches no row's {cfg.answer_key!r} in {where} "
                        f"(the first is {first!r})")
    if missed:
        log.warning("%s: task.answer_regex %r matched no answer in %d of %d rows; they are left out",
                    where, cfg.answer_regex, missed, missed + len(rows))
    if not rows:
        raise UserError(f"{where}: no rows")
    return rows


def load_hf_task(cfg: Any) -> TaskData:
    """The TaskData of `task.name: hf` (a `workbench.config.TaskConfig`); the checker is set by the caller."""
    if not cfg.path:
        raise UserError("task.path is required for task.name='hf' (a hub dataset id such as openai/gsm8k, or a local folder or file)")
    pattern = answer_pattern(cfg.answer_regex)
    splits = load_splits(cfg)
    train_ds = split_of(splits, cfg.split, "task.split", cfg.path)
    val_ds = split_of(splits, cfg.val_split, "task.val_split", cfg.path) if cfg.val_split else None
    rows = _rows(train_ds, cfg, cfg.split, pattern, offset=0)
    val_rows = _rows(val_ds, cfg, cfg.val_split, pattern, offset=len(train_ds)) if val_ds is not None else None
    task = task_from_rows(cfg, rows, source=cfg.path, val_rows=val_rows)
    task.info.update(split=cfg.split, val_split=cfg.val_split, config=cfg.config, revision=cfg.revision)
    return task
