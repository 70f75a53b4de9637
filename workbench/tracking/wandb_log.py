"""Read what W&B recorded for a run: the history rows of its `.wandb` transaction logs.

Every W&B run, online or offline, writes its records to a local transaction log,
`<wandb dir>/{run,offline-run}-<time>-<id>/run-<id>.wandb` (offline, it is the whole record that
`wandb sync` uploads). wandb 0.31 has no Python reader for it, so this one parses the format: the
header ":W&B" + magic + version (7 bytes), then LevelDB-log blocks of 32 KiB whose chunks (4-byte
CRC, 2-byte length, 1-byte type: full, first, middle, last) carry protobuf `Record`s. A log cut
short by a killed process is read up to its last whole record.

    rows = history_rows(sorted(root.glob("**/run-abc.wandb")))   # [{"step": 1, "train/loss": 0.5}, ...]
    held = points_after(rows, 4)                                 # {5: {"train/loss"}, ...}

`WandbSink.points_after` uses it to learn, after a restart, which steps W&B holds already.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Iterable

BLOCK, CHUNK_HEADER = 32768, 7
HEADER = b":W&B"
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: str | Path) -> list[Any]:
    """The protobuf `Record`s of one `.wandb` file, in order; a torn tail is left out."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    if data[:4] != HEADER:
        return []
    out, pos, buf = [], 7, b""
    while pos + CHUNK_HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < CHUNK_HEADER:  # a block's zero-padded tail
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + CHUNK_HEADER])
        if kind == 0:
            pos += left
            continue
        body = data[pos + CHUNK_HEADER : pos + CHUNK_HEADER + length]
        if len(body) < length:
            break  # the process died while writing this chunk
        pos += CHUNK_HEADER + length
        buf = body if kind in (FULL, FIRST) else buf + body
        if kind in (FULL, LAST):
            record = pb.Record()
            try:
                record.ParseFromString(buf)
            except Exception:  # noqa: BLE001 - a damaged record ends what can be read
                break
            out.append(record)
    return out


def history_rows(files: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Every history row of the files (in their order), W&B's own `_` keys left out; a logged
    object is a dict (a table: {"_type": "table-file", "path": ..., "nrows": ...})."""
    rows = []
    for f in files:
        for r in records(f):
            if r.WhichOneof("record_type") != "history":
                continue
            row: dict[str, Any] = {}
            for item in r.history.item:  # a logged object (a table) comes as one item per field
                path = [item.key] if item.key else list(item.nested_key)
                node = row
                for part in path[:-1]:
                    node = node.setdefault(part, {})
                node[path[-1]] = json.loads(item.value_json)
            rows.append({k: v for k, v in row.items() if not k.startswith("_")})
    return rows


def points_after(rows: list[dict[str, Any]], step: int, step_key: str = "step") -> dict[int, set[str]]:
    """{step: the keys logged at it} for the rows past `step`."""
    out: dict[int, set[str]] = {}
    for row in rows:
        s = row.get(step_key)
        if isinstance(s, (int, float)) and s > step:
            out.setdefault(int(s), set()).update(k for k in row if k != step_key)
    return out
