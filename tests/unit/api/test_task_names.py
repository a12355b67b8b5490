"""`task.name` is one of the tasks the registry holds: an unknown name is refused when the
manifest is read (by `dressage run` and the operator, with a did-you-mean) and by the CRD's
enum at `kubectl apply`, not by the trainer once its pods run."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from dressage.api import JobValidationError, validate_job
from dressage.api.crd import build_crd
from dressage.api.job import TASK_NAMES
from dressage.runner.cli import run


def _manifest(name: str) -> dict[str, object]:
    return {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": "job-a"},
        "spec": {"model": {"source": "builtin:tiny"}, "task": {"name": name}},
    }


@pytest.mark.parametrize(
    ("name", "hint"),
    [("arithmatic", "did you mean 'arithmetic'? "), ("chess", ""), ("Household", "did you mean")],
)
def test_an_unknown_task_is_refused_naming_the_field_and_the_known_tasks(
    name: str, hint: str
) -> None:
    with pytest.raises(JobValidationError) as info:
        validate_job(_manifest(name))
    ((field, message),) = info.value.errors
    assert field == "spec.task.name"
    assert message.startswith(f"unknown task {name!r}: {hint}")
    assert "known tasks are arithmetic, household, long_tail, dataset, environment" in message


@pytest.mark.parametrize("name", TASK_NAMES)
def test_each_known_task_is_accepted(name: str) -> None:
    manifest = _manifest(name)
    task = manifest["spec"]["task"]  # type: ignore[index]
    if name == "dataset":
        task["dataset"] = {"path": "prompts.jsonl", "promptColumn": "prompt"}
    if name == "environment":
        task["environment"] = "envs:Maze"
    assert validate_job(manifest).spec.task.name == name


def test_the_crd_refuses_an_unknown_task_at_apply() -> None:
    crd = build_crd()
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    name = spec["properties"]["task"]["properties"]["name"]
    assert (name["enum"], name["default"]) == (list(TASK_NAMES), "arithmetic")


def test_dressage_run_refuses_an_unknown_task(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(_manifest("arithmatic")), encoding="utf-8")
    args = argparse.Namespace(manifest=str(manifest), steps=None, workdir=tmp_path, fresh=False)
    assert run(args) == 2
    assert "spec.task.name: unknown task 'arithmatic': did you mean 'arithmetic'?" in (
        capsys.readouterr().err
    )
