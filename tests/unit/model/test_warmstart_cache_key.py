"""The warm start's cache key covers what the task is built from, not only its spec: editing
the dataset file (or a file of a dataset directory, or the environment's module) gives a new
key, so a stale warm start is never reused; the same contents give the same key."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dressage.api.job import TaskSpec, WarmStartSpec
from dressage.model.warmstart import cache_key
from dressage.tasks import usercode

SETTINGS = WarmStartSpec(target_reward=0.2)


def _dataset_task(path: Path) -> TaskSpec:
    return TaskSpec.model_validate(
        {
            "name": "dataset",
            "dataset": {"path": str(path), "promptColumn": "q", "answerColumn": "a"},
        }
    )


def _rows(*answers: str) -> str:
    return "".join(json.dumps({"q": f"{a}?", "a": a}) + "\n" for a in answers)


def test_editing_the_dataset_file_changes_the_key(tmp_path: Path) -> None:
    data = tmp_path / "qa.jsonl"
    data.write_text(_rows("1", "2"))
    task = _dataset_task(data)
    first = cache_key(tmp_path, task, SETTINGS)
    assert cache_key(tmp_path, task, SETTINGS) == first
    data.write_text(_rows("1", "3"))
    assert cache_key(tmp_path, task, SETTINGS) != first
    data.write_text(_rows("1", "2"))
    assert cache_key(tmp_path, task, SETTINGS) == first


def test_a_file_added_to_a_dataset_directory_changes_the_key(tmp_path: Path) -> None:
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "data-00000.arrow").write_bytes(b"rows")
    task = _dataset_task(saved)
    first = cache_key(tmp_path, task, SETTINGS)
    (saved / "data-00001.arrow").write_bytes(b"more rows")
    assert cache_key(tmp_path, task, SETTINGS) != first


def test_a_relative_dataset_path_is_hashed_where_it_resolves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(usercode, "_job_dirs", [])
    monkeypatch.chdir(tmp_path)
    (tmp_path / "qa.jsonl").write_text(_rows("1"))
    task = _dataset_task(Path("qa.jsonl"))
    first = cache_key(tmp_path, task, SETTINGS)
    (tmp_path / "qa.jsonl").write_text(_rows("2"))
    assert cache_key(tmp_path, task, SETTINGS) != first


def test_editing_the_environment_module_changes_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    module = f"warm_key_env_{abs(hash(tmp_path)) % 10**8}"
    source = tmp_path / f"{module}.py"
    source.write_text("class Env:\n    size = 3\n")
    task = TaskSpec(name="environment", environment=f"{module}:Env")
    first = cache_key(tmp_path, task, SETTINGS)
    source.write_text("class Env:\n    size = 4\n")
    assert cache_key(tmp_path, task, SETTINGS) != first
