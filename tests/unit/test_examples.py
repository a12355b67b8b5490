"""Every example manifest is a job the runtime can run: it validates, and its task builds."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dressage.api import load_job
from dressage.tasks import get_task, usercode
from dressage.tasks.usercode import add_job_dir

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.yaml"))


@pytest.mark.parametrize("manifest", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_the_examples_task_builds(manifest: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # User code and relative data paths are found beside the manifest, as `dressage run` finds
    # them; the cluster examples name `examples/` copied to the job's storage as `spec.code`,
    # where the trainer runs.
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(usercode, "_job_dirs", [])
    monkeypatch.chdir(manifest.parent)
    add_job_dir(manifest)
    job = load_job(manifest)
    if job.spec.code.path is not None:
        assert job.spec.code.path == "examples"
    get_task(job.spec.task)
