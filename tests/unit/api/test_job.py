"""The job model: camelCase wire format, defaults, and errors that name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from dressage.api import AsyncRLJob, JobValidationError, RolloutMode, load_job, validate_job

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


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


def _errors(manifest: dict[str, object]) -> dict[str, str]:
    with pytest.raises(JobValidationError) as info:
        validate_job(manifest)
    return dict(info.value.errors)


@pytest.mark.parametrize(
    ("spec", "field", "says"),
    [
        ({"suspend": "yes"}, "spec.suspend", "boolean"),
        ({"proxy": {"partialRollout": 1}}, "spec.proxy.partialRollout", "boolean"),
        ({"trainer": {"nodes": "2"}}, "spec.trainer.nodes", "integer"),
        ({"trainer": {"nodes": 2.0}}, "spec.trainer.nodes", "integer"),
        ({"rollout": {"temperature": "0.7"}}, "spec.rollout.temperature", "number"),
    ],
)
def test_scalars_are_as_strict_as_the_crd(spec: dict[str, object], field: str, says: str) -> None:
    """The CRD's `boolean`/`integer`/`number` types refuse strings; so does the model."""
    assert says in _errors(_manifest(**spec))[field]


def test_an_integer_is_a_number_and_enums_take_their_values() -> None:
    job = validate_job(_manifest(rollout={"temperature": 1, "mode": "partial_async"}))
    assert job.spec.rollout.temperature == 1.0
    assert job.spec.rollout.mode is RolloutMode.PARTIAL_ASYNC


def test_unknown_top_level_fields_are_refused_and_status_is_not_part_of_the_job() -> None:
    manifest = _manifest()
    manifest["specs"] = {}
    assert "specs" in _errors(manifest)
    live = {**_manifest(), "status": {"phase": "Running"}}
    job = validate_job(live)
    assert "status" not in job.to_wire()


def _template(env: list[dict[str, str]]) -> dict[str, object]:
    return {"nodes": 1, "template": {"env": env}}


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("1ABC", "not a valid environment variable name"),
        ("A B", "not a valid environment variable name"),
        ("A=B", "not a valid environment variable name"),
        ("MASTER_ADDR", "MASTER_ADDR is set by the operator"),
        ("NODE_RANK", "set by the operator"),
        ("RANK", "set by the operator"),
        ("DRESSAGE_ENGINE_URLS", "set by the operator"),
    ],
)
def test_env_names_must_be_valid_and_not_the_operators(name: str, says: str) -> None:
    env = [{"name": "NCCL_DEBUG", "value": "WARN"}, {"name": name, "value": "x"}]
    errors = _errors(_manifest(trainer=_template(env)))
    assert says in errors["spec.trainer.template.env[1].name"]


def test_env_names_kubernetes_accepts_are_accepted() -> None:
    names = ["NCCL_DEBUG", "my.env-name", "_X1", "DRESSAGE_LOG_LEVEL"]
    job = validate_job(_manifest(inference={"template": {"env": [{"name": n} for n in names]}}))
    assert [e.name for e in job.spec.inference.template.env] == names


@pytest.mark.parametrize("value", ["8", "1.5", "500m", "64Gi", "1e3", ".5", "+2", "100k"])
def test_kubernetes_quantities_are_accepted(value: str) -> None:
    job = validate_job(_manifest(trainer={"resources": {"limits": {"memory": value}}}))
    assert job.spec.trainer.resources.limits["memory"] == value


@pytest.mark.parametrize("value", ["", "-1", "1 Gi", "1gi", "lots", "1.2.3", "0x10"])
def test_bad_quantities_are_refused_naming_the_resource(value: str) -> None:
    errors = _errors(_manifest(proxy={"resources": {"requests": {"cpu": value}}}))
    assert "not a Kubernetes quantity" in errors["spec.proxy.resources.requests.cpu"]


@pytest.mark.parametrize(
    ("arg", "says"),
    [
        ("--port", "--port is set by the operator"),
        ("--port=8000", "--port is set by the operator"),
        ("--host", "--host is set by the operator"),
        ("--model-path", "spec.model.source"),
        ("--tp-size", "spec.inference.tensorParallelSize"),
        ("--dtype=float16", "spec.model.dtype"),
    ],
)
def test_engine_args_cannot_set_the_operators_flags(arg: str, says: str) -> None:
    inference = {"extraArgs": ["--mem-fraction-static", "0.8", arg]}
    errors = _errors(_manifest(inference=inference))
    assert says in errors["spec.inference.extraArgs[2]"]


def test_images_with_whitespace_are_refused() -> None:
    errors = _errors(_manifest(trainer={"image": "registry/runtime: 1"}))
    assert "spec.trainer.image" in errors


def test_the_sglang_release_defaults_to_the_image_pin() -> None:
    from dressage.api.sglang import SGLANG_PINNED_VERSION

    job = validate_job(_manifest())
    assert job.spec.inference.sglang_version == SGLANG_PINNED_VERSION
    assert not job.spec.rollout.seeded_sampling


@pytest.mark.parametrize("version", ["0.5.1", "0.4.9", "latest", ""])
def test_an_sglang_release_outside_the_supported_range_is_named(version: str) -> None:
    with pytest.raises(JobValidationError) as info:
        validate_job(_manifest(inference={"sglangVersion": version}))
    assert "spec.inference.sglangVersion" in [path for path, _ in info.value.errors]


def test_seeded_sampling_needs_a_release_with_deterministic_inference() -> None:
    with pytest.raises(JobValidationError) as info:
        validate_job(
            _manifest(rollout={"seededSampling": True}, inference={"sglangVersion": "0.5.2"})
        )
    message = str(info.value)
    assert "rollout.seededSampling" in message
    assert "inference.sglangVersion is 0.5.2" in message
    job = validate_job(
        _manifest(rollout={"seededSampling": True}, inference={"sglangVersion": "0.5.3.post1"})
    )
    assert job.spec.rollout.seeded_sampling
