"""User code and data next to the job manifest: once the manifest's directory is registered
(`add_job_dir`, what `dressage run` does), its modules import and its relative dataset paths
resolve from any working directory; `check_task` fails fast naming what is missing."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from dressage.api.job import TaskSpec
from dressage.api.loader import load_job
from dressage.tasks import check_task, get_task, usercode
from dressage.tasks.dataset import DatasetTask
from dressage.tasks.usercode import UserCodeError, add_job_dir, import_object, resolve_path

MANIFEST = """
apiVersion: dressage.io/v1alpha1
kind: AsyncRLJob
metadata:
  name: user-code
spec:
  model:
    source: builtin:tiny
  task:
    name: dataset
    dataset:
      path: data/qa.jsonl
      promptColumn: q
      answerColumn: a
    reward: {module}:score
"""


@pytest.fixture
def job_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A job directory with a manifest, a reward module and a dataset; the working directory
    is elsewhere, and `sys.path` and the registered job directories are restored after."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(usercode, "_job_dirs", [])
    job = tmp_path / "job"
    (job / "data").mkdir(parents=True)
    module = f"job_rewards_{abs(hash(tmp_path)) % 10**8}"
    (job / f"{module}.py").write_text(
        textwrap.dedent("""
            def score(completion, row):
                return 2.0 if completion == row["a"] else 0.0
        """),
        encoding="utf-8",
    )
    (job / "data" / "qa.jsonl").write_text(json.dumps({"q": "1+1=", "a": "2"}) + "\n")
    (job / "job.yaml").write_text(MANIFEST.format(module=module), encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    yield job
    sys.modules.pop(module, None)


def test_a_job_next_to_its_code_and_data_runs_from_another_directory(job_dir: Path) -> None:
    manifest = job_dir / "job.yaml"
    job = load_job(manifest)
    with pytest.raises(UserCodeError, match=r"spec\.task\.reward: cannot import module"):
        check_task(job.spec.task)
    added = add_job_dir(manifest)
    assert str(job_dir) in added
    assert sys.path[: len(added)] == added
    check_task(job.spec.task)
    task = get_task(job.spec.task)
    assert isinstance(task, DatasetTask)
    assert task.reward(task.prompt(0), "2") == 2.0


def test_add_job_dir_adds_each_directory_once(job_dir: Path) -> None:
    add_job_dir(job_dir / "job.yaml")
    before = list(sys.path)
    assert add_job_dir(job_dir / "job.yaml") == []
    assert sys.path == before


def test_relative_paths_try_the_job_dir_then_the_working_dir(job_dir: Path) -> None:
    add_job_dir(job_dir / "job.yaml")
    (Path.cwd() / "only-here.jsonl").write_text("")
    assert resolve_path("data/qa.jsonl", "f") == job_dir / "data" / "qa.jsonl"
    assert resolve_path("only-here.jsonl", "f") == Path.cwd() / "only-here.jsonl"
    with pytest.raises(
        UserCodeError, match=rf"f: absent\.jsonl does not exist \(looked in {job_dir}, "
    ):
        resolve_path("absent.jsonl", "f")


def test_check_task_names_a_missing_dataset_file(job_dir: Path) -> None:
    spec = TaskSpec.model_validate(
        {"name": "dataset", "dataset": {"path": "nope.jsonl", "promptColumn": "q"}}
    )
    with pytest.raises(UserCodeError, match=r"spec\.task\.dataset\.path: nope\.jsonl does not"):
        check_task(spec)


def test_an_error_inside_the_user_module_is_reported_with_the_import_path(
    job_dir: Path,
) -> None:
    add_job_dir(job_dir / "job.yaml")
    (job_dir / "broken_rewards_mod.py").write_text("import not_installed_dep\n")
    with pytest.raises(
        UserCodeError,
        match=r"spec\.task\.reward: cannot import module 'broken_rewards_mod' of "
        r"'broken_rewards_mod:f': ModuleNotFoundError: No module named 'not_installed_dep'",
    ):
        import_object("broken_rewards_mod:f", "spec.task.reward")
    sys.modules.pop("broken_rewards_mod", None)
