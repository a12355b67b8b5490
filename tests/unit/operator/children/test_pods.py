"""The pod plumbing every child shares: strict Kubernetes validity, owner and hash, model
staging, storage, the Pod Security Standard, and the names the job model reserves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from dressage_operator import children, naming
from dressage_testkit.kube import restricted_violations
from pydantic import ValidationError

from dressage.api import load_job
from dressage.api.job import (
    OPERATOR_ENGINE_FLAGS,
    OPERATOR_ENV,
    PodSecuritySpec,
    PodTemplateOverrides,
)
from dressage.model import staging

from .support import (
    CONFIG,
    EXAMPLES,
    K8S_VERSION,
    OWNER,
    all_children,
    distributed_job,
    hub_job,
    pod_specs,
)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_child_passes_strict_kubernetes_validation(example: Path) -> None:
    job = load_job(example)
    objs = all_children(job)
    for obj in objs:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        meta = obj["metadata"]
        assert meta["ownerReferences"] == [OWNER.reference()]
        assert meta["labels"][naming.LABEL_JOB] == "job-a"
        assert meta["annotations"][naming.ANNOTATION_HASH] == children.spec_hash(obj)
    names = [(o["kind"], o["metadata"]["name"]) for o in objs]
    assert len(names) == len(set(names))
    assert names == [(o["kind"], o["metadata"]["name"]) for o in all_children(job)]


def test_a_hub_model_is_staged_before_any_pod_reads_it_and_only_staging_sees_the_token() -> None:
    job = hub_job(revision="v1.0", tokenSecret={"name": "hf", "key": "token"})
    staged = "/data/models/meta-llama--Llama-3.1-8B@v1.0"
    assert children.model_path(job) == staged
    for role, spec in pod_specs(job).items():
        (init,) = spec["initContainers"]
        assert init["name"] == children.STAGE_MODEL_CONTAINER, role
        assert init["command"] == [
            "python",
            "-m",
            "dressage",
            "stage-model",
            "--source",
            "meta-llama/Llama-3.1-8B",
            "--dest",
            staged,
            "--revision",
            "v1.0",
        ]
        assert init["image"] == CONFIG.runtime_image
        assert init["volumeMounts"] == [{"name": "storage", "mountPath": "/data"}]
        token = [e for e in init["env"] if e["name"] == staging.TOKEN_ENV]
        assert token == [
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
        ]
        for container in spec["containers"]:
            assert "HF_TOKEN" not in str(container), role
    specs = pod_specs(job)
    engine_cmd = specs["engine"]["containers"][0]["command"]
    assert engine_cmd[engine_cmd.index("--model-path") + 1] == staged
    proxy_cmd = specs["proxy"]["containers"][0]["command"]
    assert proxy_cmd[proxy_cmd.index("--model") + 1] == staged
    manifest = yaml.safe_load(children.build_config_map(job, OWNER)["data"][naming.CONFIG_KEY])
    assert manifest["spec"]["model"]["source"] == staged
    for obj in all_children(job):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_an_offline_hub_model_is_staged_from_the_cache_only() -> None:
    for offline in (False, True):
        job = hub_job(hubOffline=offline)
        for role, spec in pod_specs(job).items():
            (init,) = spec["initContainers"]
            env = {e["name"]: e.get("value") for e in init["env"]}
            assert env["HF_HOME"] == "/data/models/.hf-home", role
            assert ("HF_HUB_OFFLINE" in env) is offline, role
            if offline:
                assert env["HF_HUB_OFFLINE"] == "1"
            for container in spec["containers"]:
                assert "HF_HUB_OFFLINE" not in str(container), role


def test_a_model_on_a_path_is_read_in_place_without_staging() -> None:
    job = hub_job()
    job.spec.model.source = "/data/checkpoints/base"
    job.spec.model.tokenizer = "/data/tokenizers/base"
    for spec in pod_specs(job).values():
        assert "initContainers" not in spec
    proxy_cmd = pod_specs(job)["proxy"]["containers"][0]["command"]
    assert proxy_cmd[proxy_cmd.index("--model") + 1] == "/data/tokenizers/base"
    public = hub_job()
    assert "HF_TOKEN" not in str(pod_specs(public)["trainer"]["initContainers"])


def test_hash_changes_with_what_the_child_contains_only() -> None:
    """The drift check compares hashes: a change the child carries changes its hash, a change
    it does not carry (another role's settings) leaves it, so that child is not patched."""
    job = load_job(EXAMPLES[0])
    before = children.build_proxy_deployment(job, OWNER, CONFIG)
    job.spec.proxy.image = "registry.example/dressage-runtime:other"
    after = children.build_proxy_deployment(job, OWNER, CONFIG)

    def hash_of(obj: dict[str, Any]) -> str:
        value: str = obj["metadata"]["annotations"][naming.ANNOTATION_HASH]
        return value

    assert hash_of(before) != hash_of(after)
    job.spec.trainer.nodes += 1
    assert hash_of(children.build_proxy_deployment(job, OWNER, CONFIG)) == hash_of(after)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_the_model_reserves_every_variable_and_engine_flag_the_builders_set(
    example: Path,
) -> None:
    """`template.env` and `inference.extraArgs` cannot override the operator's wiring: the
    job model refuses exactly what these builders set."""
    job = load_job(example)
    set_by_builders = set(children.trainer_env(job, OWNER, 0))
    for container in (
        children.build_engine_pod(job, OWNER, CONFIG, 0)["spec"]["containers"][0],
        children.build_proxy_deployment(job, OWNER, CONFIG)["spec"]["template"]["spec"][
            "containers"
        ][0],
    ):
        user = {e.name for e in job.spec.inference.template.env + job.spec.proxy.template.env}
        set_by_builders |= {e["name"] for e in container["env"]} - user
    assert set_by_builders <= OPERATOR_ENV
    engine = children.engine_command(job)[3 : -len(job.spec.inference.extra_args) or None]
    flags = {a for a in engine if a.startswith("--")}
    assert flags <= set(OPERATOR_ENGINE_FLAGS)


def test_every_pod_can_write_the_shared_claim_as_the_runtime_user() -> None:
    job = hub_job()
    for role, spec in pod_specs(job).items():
        (storage,) = [v for v in spec["volumes"] if v["name"] == "storage"]
        assert storage["persistentVolumeClaim"] == {"claimName": "shared"}, role
        assert spec["securityContext"]["fsGroup"] == 1000, role


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_pod_meets_the_restricted_pod_security_standard(example: Path) -> None:
    job = load_job(example)
    job.spec.storage.persistent_volume_claim = "shared"
    for role, spec in pod_specs(job).items():
        assert restricted_violations(spec) == [], role
        assert spec["automountServiceAccountToken"] is False, role
        assert spec["securityContext"]["runAsUser"] == 1000, role


def test_baseline_is_the_explicit_relaxation_for_gpu_images() -> None:
    """An engine image that must run as root with IPC_LOCK: the role says so in its template;
    the other roles stay restricted."""
    job = hub_job()
    job.spec.inference.template.security = PodSecuritySpec(
        profile="baseline", add_capabilities=["IPC_LOCK"]
    )
    specs = pod_specs(job)
    engine = specs["engine"]
    assert "runAsNonRoot" not in engine["securityContext"]
    assert "runAsUser" not in engine["securityContext"]
    (container,) = engine["containers"]
    assert container["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    assert "capabilities" not in engine["initContainers"][0]["securityContext"]
    assert restricted_violations(engine, "baseline") == []
    assert restricted_violations(engine) != []
    assert restricted_violations(specs["trainer"]) == []
    kubernetes_validate.validate(
        children.build_engine_pod(job, OWNER, CONFIG, 0), K8S_VERSION, strict=True
    )


def test_host_path_volumes_and_extra_capabilities_under_restricted_are_refused() -> None:
    template = {"volumes": [{"name": "node", "hostPath": {"path": "/var/lib"}}]}
    with pytest.raises(ValidationError, match="'node' is a hostPath volume"):
        PodTemplateOverrides.model_validate(template)
    with pytest.raises(ValidationError, match="set profile to 'baseline'"):
        PodSecuritySpec.model_validate({"addCapabilities": ["IPC_LOCK"]})
    assert PodSecuritySpec.model_validate({"addCapabilities": ["NET_BIND_SERVICE"]})


def test_a_one_node_distributed_job_without_a_claim_gets_storage_of_its_own_per_pod() -> None:
    job = distributed_job(trainer={"nodes": 1, "gpusPerNode": 1})
    for obj in all_children(job):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    for role, spec in pod_specs(job).items():
        (storage,) = [v for v in spec["volumes"] if v["name"] == "storage"]
        assert storage == {"name": "storage", "emptyDir": {}}, role
