"""Read a Weights & Biases run back from its transaction log (`run-<id>.wandb`), offline.

W&B's SDK writes every record of a run (the run itself with its config and tags, each history
row, the summary...) as a `wandb_internal_pb2.Record` protobuf to that file, which
`wandb sync` uploads later. Since wandb-core took over writing it, the SDK has no Python
reader any more (`wandb.sdk.internal.datastore` is gone), so this reads the file's framing, as
the SDK's reader did, and parses each record with W&B's own protobuf messages:

- a 7-byte header: `:W&B`, magic 0xBEE1 (little-endian uint16), version 0;
- then LevelDB's log format in 32 KiB blocks: each chunk a 7-byte header (CRC32C, length as
  uint16, type: 1 full, 2 first, 3 middle, 4 last) then its bytes; a block's tail shorter
  than a header is zero padding.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BLOCK = 32 * 1024
HEADER = struct.Struct("<4sHB")
CHUNK = struct.Struct("<IHB")
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> Iterator[bytes]:
    """The serialized records of a `.wandb` file, in order."""
    data = path.read_bytes()
    ident, magic, version = HEADER.unpack_from(data)
    if (ident, magic, version) != (b":W&B", 0xBEE1, 0):
        raise ValueError(f"{path}: not a W&B transaction log (header {ident!r} {magic:#x})")
    position, pending = HEADER.size, b""
    while position + CHUNK.size <= len(data):
        left_in_block = BLOCK - position % BLOCK
        if left_in_block < CHUNK.size:
            position += left_in_block
            continue
        _crc, length, kind = CHUNK.unpack_from(data, position)
        if kind == 0 and length == 0:  # padding to the end of the file
            break
        start = position + CHUNK.size
        chunk, position = data[start : start + length], start + length
        if kind == FULL:
            yield chunk
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            yield pending + chunk
            pending = b""


@dataclass
class WandbRun:
    """What a run's log says: its identity, config and history rows."""

    id: str = ""
    project: str = ""
    name: str = ""
    tags: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def keys(self) -> set[str]:
        """Every key a history row holds."""
        return {key for row in self.rows for key in row}

    def history(self, key: str) -> dict[int, float]:
        """`key`'s value by step (`_step`), over the rows that hold it."""
        return {int(row["_step"]): float(row[key]) for row in self.rows if key in row}


def read_run(path: Path) -> WandbRun:
    """The run recorded in the `.wandb` file `path`."""
    from wandb.proto import wandb_internal_pb2

    run = WandbRun()
    for data in records(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run.id = record.run.run_id
            run.project = record.run.project
            run.name = record.run.display_name
            run.tags = list(record.run.tags)
            run.config.update(_items(record.run.config.update))
        elif kind == "config":
            run.config.update(_items(record.config.update))
        elif kind == "history":
            run.rows.append(_items(record.history.item))
    return run


def _items(items: Any) -> dict[str, Any]:
    return {(item.key or "/".join(item.nested_key)): json.loads(item.value_json) for item in items}
