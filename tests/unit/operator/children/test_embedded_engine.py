"""Engine pods of `spec.inference.engine: embedded`: Dressage's CPU engine from the runtime
image, its command line read by `dressage`'s own parser, its probes on the routes of the
release it plays, CPU and memory instead of a GPU, and what a cluster cannot run with it."""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from dressage_operator import children
from dressage_operator.children.engine import EMBEDDED_REQUESTS
from dressage_operator.validation import spec_errors

from dressage import cli
from dressage.api import AsyncRLJob
from dressage.api.loader import JobValidationError, validate_job
from dressage.engine.embedded.release_profiles import PROFILES

from .support import CONFIG, OWNER


def _manifest(**inference: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "job-a"},
        "spec": {
            "model": {"source": "builtin:tiny", "warmStart": {}},
            "trainer": {"gpusPerNode": 0},
            "inference": {"engine": "embedded", "weightSync": "distributed", **inference},
            "training": {"seed": 7},
        },
    }


def _job(**inference: Any) -> AsyncRLJob:
    return AsyncRLJob.model_validate(_manifest(**inference))


def _serve_args(command: list[str]) -> argparse.Namespace:
    assert command[:3] == ["python", "-m", "dressage"]
    return cli.build_parser(command[3:]).parse_args(command[3:])


def test_the_engine_container_runs_dressage_engine_serve_from_the_runtime_image() -> None:
    pod = children.build_engine_pod(_job(replicas=2), OWNER, CONFIG, 1)
    (container,) = pod["spec"]["containers"]
    assert container["name"] == "engine"
    assert container["image"] == CONFIG.runtime_image
    args = _serve_args(container["command"])
    assert (args.engine_command, args.model, args.host) == ("serve", "builtin:tiny", "0.0.0.0")
    assert args.port == 30000
    assert args.weight_version == "base"  # warm-started: the publisher brings it to v1
    assert args.seed == 8  # training.seed + the engine's index, as `dressage run` seeds them
    assert args.threads == 1
    assert args.sglang_release in PROFILES
    assert container["resources"] == {"requests": EMBEDDED_REQUESTS}
    assert container["ports"] == [{"name": "http", "containerPort": 30000}]
    # The engine's home, where a built-in model is built, is an emptyDir.
    home = {e["name"]: e["value"] for e in container["env"]}["HOME"]
    assert {"name": "home", "mountPath": home} in container["volumeMounts"]


def test_cpu_requests_set_the_threads_and_replace_the_defaults() -> None:
    job = _job(resources={"requests": {"cpu": "2500m"}, "limits": {"memory": "4Gi"}})
    (container,) = children.build_engine_pod(job, OWNER, CONFIG, 0)["spec"]["containers"]
    assert _serve_args(container["command"]).threads == 2
    assert container["resources"] == {
        "requests": {"cpu": "2500m"},
        "limits": {"memory": "4Gi"},
    }


@pytest.mark.parametrize(("version", "played"), [("0.5.2", "0.5.2"), ("0.5.10", "0.5.2")])
def test_the_engine_plays_the_tested_release_standing_in_for_the_jobs(
    version: str, played: str
) -> None:
    job = _job(sglangVersion=version)
    (container,) = children.build_engine_pod(job, OWNER, CONFIG, 0)["spec"]["containers"]
    assert _serve_args(container["command"]).sglang_release == played
    # Its probes use the live route of the release it plays (0.5.2 serves no /model_info).
    assert container["livenessProbe"]["httpGet"]["path"] == "/get_model_info"
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 5 * 60


@pytest.mark.parametrize(
    ("inference", "field"),
    [
        ({"tensorParallelSize": 2}, "spec.inference.tensorParallelSize"),
        ({"extraArgs": ["--mem-fraction-static", "0.8"]}, "spec.inference.extraArgs"),
        (
            {"resources": {"limits": {"nvidia.com/gpu": "1"}}},
            "spec.inference.resources.limits.nvidia.com/gpu",
        ),
    ],
)
def test_gpu_only_settings_are_refused_naming_the_field(
    inference: dict[str, Any], field: str
) -> None:
    with pytest.raises(JobValidationError) as refused:
        validate_job(_manifest(**inference))
    ((path, message),) = refused.value.errors
    assert path == field
    assert "embedded" in message


def test_a_cluster_refuses_distributed_sync_between_a_gpu_trainer_and_embedded_engines() -> None:
    manifest = _manifest()
    manifest["spec"]["trainer"] = {"gpusPerNode": 1}
    manifest["spec"]["storage"] = {"persistentVolumeClaim": "shared"}
    _, errors = spec_errors(manifest, "job")
    ((field, message),) = errors
    assert field == "spec.inference.weightSync"
    assert "gloo" in message
    assert "spec.trainer.gpusPerNode" in message
    manifest["spec"]["inference"]["weightSync"] = "disk"
    assert spec_errors(manifest, "job")[1] == ()


def test_a_one_node_cpu_job_with_distributed_sync_needs_no_claim() -> None:
    job, errors = spec_errors(_manifest(), "job")
    assert errors == ()
    assert job is not None
    pods = [*children.build_trainer_pods(job, OWNER, CONFIG, 0)]
    pods.append(children.build_engine_pod(job, OWNER, CONFIG, 0))
    for pod in pods:
        storage = [v for v in pod["spec"]["volumes"] if v["name"] == "storage"]
        assert storage == [{"name": "storage", "emptyDir": {}}]
        assert "nvidia.com/gpu" not in str(pod["spec"]["containers"][0]["resources"])


def test_sglang_stays_the_default_engine() -> None:
    job = AsyncRLJob.model_validate(
        {"metadata": {"name": "job-a"}, "spec": {"model": {"source": "builtin:tiny"}}}
    )
    assert job.spec.inference.engine == "sglang"
    (container,) = children.build_engine_pod(job, OWNER, CONFIG, 0)["spec"]["containers"]
    assert container["name"] == "sglang"
    assert container["command"][:3] == ["python", "-m", "sglang.launch_server"]


def test_a_new_seed_replaces_embedded_engines_only() -> None:
    """The embedded engine's command carries `spec.training.seed`; SGLang's does not."""
    seeded = _manifest()
    seeded["spec"]["training"]["seed"] = 8
    assert children.engine_spec_hash(_job()) != children.engine_spec_hash(
        AsyncRLJob.model_validate(seeded)
    )
    sglang = []
    for seed in (7, 8):
        manifest = _manifest()
        manifest["spec"]["inference"] = {"weightSync": "distributed"}
        manifest["spec"]["training"]["seed"] = seed
        sglang.append(AsyncRLJob.model_validate(manifest))
    assert len({children.engine_spec_hash(j) for j in sglang}) == 1
