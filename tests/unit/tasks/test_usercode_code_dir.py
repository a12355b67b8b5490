"""The job's code directory on its storage (`spec.code.path`), as the trainer pods use it:
`dressage train` runs in it, so the reward module imports and the relative dataset path
resolves there; a directory that is not there is an error naming the field (the trainer
process stopping on it: tests/integration/test_tasks_code_dir.py)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from dressage.api.loader import validate_job
from dressage.tasks import get_task, usercode
from dressage.tasks.usercode import UserCodeError, enter_code_dir


def _manifest(storage: Path, module: str) -> dict[str, object]:
    return {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": "code-dir"},
        "spec": {
            "model": {"source": "builtin:tiny"},
            "storage": {"persistentVolumeClaim": "shared", "mountPath": str(storage)},
            "code": {"path": "jobs/qa"},
            "task": {
                "name": "dataset",
                "dataset": {"path": "data/qa.jsonl", "promptColumn": "q", "answerColumn": "a"},
                "reward": f"{module}:score",
            },
        },
    }


@pytest.fixture
def storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A job's storage holding its code directory; the working directory is elsewhere."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(usercode, "_job_dirs", [])
    code = tmp_path / "storage" / "jobs" / "qa"
    (code / "data").mkdir(parents=True)
    (code / "data" / "qa.jsonl").write_text(json.dumps({"q": "1+1=", "a": "2"}) + "\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return tmp_path / "storage"


def test_in_the_code_dir_the_reward_imports_and_the_data_resolves(storage: Path) -> None:
    module = f"code_dir_rewards_{abs(hash(storage)) % 10**8}"
    code = storage / "jobs" / "qa"
    (code / f"{module}.py").write_text(
        textwrap.dedent("""
            def score(completion, row):
                return 3.0 if completion == row["a"] else 0.0
        """),
        encoding="utf-8",
    )
    job = validate_job(_manifest(storage, module))
    assert enter_code_dir(job.spec) == code
    assert Path.cwd() == code
    task = get_task(job.spec.task)
    prompt = task.prompt(0)
    assert prompt.text == "1+1="
    assert task.reward(prompt, "2") == 3.0


def test_a_job_without_code_stays_where_it_is(storage: Path) -> None:
    manifest = _manifest(storage, "unused")
    del manifest["spec"]["code"]  # type: ignore[attr-defined]
    before = Path.cwd()
    assert enter_code_dir(validate_job(manifest).spec) is None
    assert Path.cwd() == before


def test_a_missing_code_dir_is_an_error_naming_the_field(storage: Path) -> None:
    manifest = _manifest(storage, "unused")
    manifest["spec"]["code"] = {"path": "jobs/missing"}  # type: ignore[index]
    with pytest.raises(UserCodeError, match=r"^spec.code.path: .*jobs/missing is not a dir"):
        enter_code_dir(validate_job(manifest).spec)
