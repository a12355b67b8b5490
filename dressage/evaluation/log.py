"""The run's held-out evaluations on disk: `<run>/evaluations.jsonl`, one line per version.

Kept across restarts like the step history: a resumed run forgets the evaluations past its
checkpoint (`truncate`) and the record of a version evaluated again replaces the earlier one
(`append`). `dressage run` and the trainer gang's rank 0 write it; the run report and the
best-version pin read it back.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dressage.data.jsonl import JsonLines
from dressage.evaluation.figures import Evaluation

EVALUATIONS = "evaluations.jsonl"


class EvaluationLog(JsonLines):
    """Append-only held-out evaluations in `<run>/evaluations.jsonl`."""

    def __init__(self, run_root: Path) -> None:
        super().__init__(Path(run_root) / EVALUATIONS)

    def truncate(self, step: int) -> None:
        """Forget evaluations of versions past `step` (a resumed run evaluates them again)."""
        if self.path.is_file():
            self.rewrite(r for r in self.read() if int(r.get("step", 0)) <= step)

    def append(self, record: Mapping[str, Any]) -> None:
        """Add `record`, in place of an earlier one of its version (a resumed run evaluates
        the version it resumes at again)."""
        records = self.read()
        if any(r.get("version") == record.get("version") for r in records):
            self.rewrite(r for r in records if r.get("version") != record.get("version"))
        super().append(record)

    def evaluations(self) -> list[Evaluation]:
        return [Evaluation.from_dict(r) for r in self.read()]
