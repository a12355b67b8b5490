"""A run's records kept one JSON object per line in one file (`history.jsonl`,
`evaluations.jsonl`): read whole, appended to, or rewritten whole when a resumed run forgets
what came after its checkpoint. The files are small (one line per step or per evaluation), so
whole reads and rewrites keep the rules simple."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any


class JsonLines:
    """The records of one JSON-lines file; a missing file holds none."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def read(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        lines = self.path.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def rewrite(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Replace the file's records with `records`."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps(dict(r)) + "\n" for r in records)
        self.path.write_text(text, encoding="utf-8")

    def append(self, record: Mapping[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(dict(record)) + "\n")
