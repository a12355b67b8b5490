"""The run's held-out evaluations on disk: `<run>/evaluations.jsonl`, one line per version.

Kept across restarts like the step history: a resumed run forgets the evaluations past its
checkpoint (`truncate`) and the record of a version evaluated again replaces the earlier one
(`append`). `dressage run` and the trainer gang's rank 0 write it; the run report and the
best-version pin read it back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dressage.evaluation.figures import Evaluation

EVALUATIONS = "evaluations.jsonl"


class EvaluationLog:
    """Append-only held-out evaluations in `<run>/evaluations.jsonl`."""

    def __init__(self, run_root: Path) -> None:
        self.path = Path(run_root) / EVALUATIONS

    def read(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        lines = self.path.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def truncate(self, step: int) -> None:
        """Forget evaluations of versions past `step` (a resumed run evaluates them again)."""
        if self.path.is_file():
            kept = [r for r in self.read() if int(r.get("step", 0)) <= step]
            self.path.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")

    def append(self, record: Mapping[str, Any]) -> None:
        """Add `record`, in place of an earlier one of its version (a resumed run evaluates
        the version it resumes at again)."""
        earlier = [r for r in self.read() if r.get("version") == record.get("version")]
        if earlier:
            kept = [r for r in self.read() if r.get("version") != record.get("version")]
            self.path.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(dict(record)) + "\n")

    def evaluations(self) -> list[Evaluation]:
        return [Evaluation.from_dict(r) for r in self.read()]
