"""The job model: camelCase wire format, defaults, and errors that name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from dressage.api import AsyncRLJob, JobValidationError, RolloutMode, load_job, validate_job

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _manifest(**spec: object) -> dict[str, object]:
    base: dict[str, object] = {"model": {"source": "builtin:tiny"}}
    base.update(spec)
    return {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": "job-a"},
        "spec": base,
    }


def test_defaults_and_camel_case_round_trip() -> None:
    job = validate_job(_manifest(staleness={"keepVersions": 2}))
    assert job.spec.staleness.keep_versions == 2
    assert job.spec.staleness.max_partial_rollout_preempts is None
    assert job.spec.rollout.mode is RolloutMode.FULLY_ASYNC
    wire = job.to_wire()
    assert wire["spec"]["staleness"]["keepVersions"] == 2  # type: ignore[index]
    assert AsyncRLJob.model_validate(wire) == job


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"staleness": {"keepVersions": -1}}, "spec.staleness.keepVersions"),
        (
            {"staleness": {"maxPartialRolloutPreempts": -2}},
            "spec.staleness.maxPartialRolloutPreempts",
        ),
        ({"rollout": {"maxRetries": -1}}, "spec.rollout.maxRetries"),
        ({"rollout": {"mode": "eventually"}}, "spec.rollout.mode"),
        ({"rollout": {"groupSize": "many"}}, "spec.rollout.groupSize"),
        ({"staleness": {"keepVersion": 2}}, "spec.staleness.keepVersion"),
    ],
)
def test_invalid_fields_are_named(spec: dict[str, object], field: str) -> None:
    with pytest.raises(JobValidationError) as info:
        validate_job(_manifest(**spec))
    assert field in [path for path, _ in info.value.errors]
    assert field in str(info.value)


def test_missing_model_is_named() -> None:
    manifest = _manifest()
    manifest["spec"] = {}
    with pytest.raises(JobValidationError) as info:
        validate_job(manifest)
    assert "spec.model" in str(info.value)


def test_preempt_limit_requires_partial_rollout() -> None:
    with pytest.raises(JobValidationError, match="maxPartialRolloutPreempts"):
        validate_job(_manifest(staleness={"maxPartialRolloutPreempts": 2}))
    job = validate_job(
        _manifest(staleness={"maxPartialRolloutPreempts": 2}, rollout={"mode": "partial_async"})
    )
    assert job.spec.partial_rollout


def test_local_example_loads() -> None:
    job = load_job(EXAMPLES / "local-tiny.yaml")
    assert job.metadata.name == "local-tiny"


def test_load_job_rejects_other_kinds(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    with pytest.raises(JobValidationError, match="kind"):
        load_job(path)


def test_rollout_in_flight_beyond_proxy_admission_is_refused() -> None:
    with pytest.raises(JobValidationError, match=r"rollout.concurrency x rollout.groupSize"):
        validate_job(_manifest(rollout={"concurrency": 48, "groupSize": 8}))
    job = validate_job(
        _manifest(rollout={"concurrency": 48, "groupSize": 8}, proxy={"maxConcurrency": 512})
    )
    assert job.spec.proxy.max_concurrency == 512
