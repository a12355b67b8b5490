"""Every example manifest is a job the runtime can run: it validates, and its task builds."""

from __future__ import annotations

from pathlib import Path

import pytest

from dressage.api import load_job
from dressage.tasks import get_task

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.yaml"))


@pytest.mark.parametrize("manifest", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_the_examples_task_builds(manifest: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Relative data paths are looked up beside the manifest, as `dressage run` does.
    monkeypatch.chdir(manifest.parent)
    job = load_job(manifest)
    get_task(job.spec.task)
