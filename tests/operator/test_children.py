"""Pure builders: every child is a valid Kubernetes object (strict schema of a current
release), owned by its job, named deterministically and wired to the others."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from dressage_operator import children, naming
from dressage_operator.config import OperatorConfig
from dressage_operator.rbac import CLUSTER_RULES, cluster_role
from dressage_operator.testing import restricted_violations
from pydantic import ValidationError

from dressage.api import AsyncRLJob, load_job
from dressage.api.job import (
    OPERATOR_ENGINE_FLAGS,
    OPERATOR_ENV,
    PodSecuritySpec,
    PodTemplateOverrides,
    SecretKeySelector,
    WarmStartSpec,
)
from dressage.data.versions import INITIAL_VERSION
from dressage.model import staging
from dressage.orchestrator import train_cli
from dressage.proxy import cli as proxy_cli
from dressage.proxy.config import parse_engine_urls

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))
K8S_VERSION = "1.33.0"
CONFIG = OperatorConfig()
OWNER = children.Owner(name="job-a", namespace="ns", uid="uid-1")


def _all_children(job: AsyncRLJob) -> list[dict[str, Any]]:
    return [
        *children.build_infrastructure(job, OWNER),
        children.build_proxy_deployment(job, OWNER, CONFIG),
        *children.build_trainer_pods(job, OWNER, CONFIG, gang=0),
        *children.build_engine_pods(job, OWNER, CONFIG),
    ]


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"]}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_child_passes_strict_kubernetes_validation(example: Path) -> None:
    job = load_job(example)
    objs = _all_children(job)
    for obj in objs:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        meta = obj["metadata"]
        assert meta["ownerReferences"] == [OWNER.reference()]
        assert meta["labels"][naming.LABEL_JOB] == "job-a"
        assert meta["annotations"][naming.ANNOTATION_HASH] == children.spec_hash(obj)
    names = [(o["kind"], o["metadata"]["name"]) for o in objs]
    assert len(names) == len(set(names))
    assert names == [(o["kind"], o["metadata"]["name"]) for o in _all_children(job)]


def test_trainer_gang_rendezvous_and_wiring() -> None:
    job = load_job(EXAMPLES[0].parent / "multi-node-partial-rollout.yaml")
    pods = children.build_trainer_pods(job, OWNER, CONFIG, gang=2)
    assert [p["metadata"]["name"] for p in pods] == ["job-a-trainer-0", "job-a-trainer-1"]
    for rank, pod in enumerate(pods):
        spec = pod["spec"]
        assert (spec["hostname"], spec["subdomain"]) == (f"job-a-trainer-{rank}", "job-a-trainer")
        assert spec["restartPolicy"] == "Never"
        assert spec["priorityClassName"] == "gpu-training"
        assert spec["imagePullSecrets"] == [{"name": "registry-credentials"}]
        (container,) = spec["containers"]
        env = _env(container)
        assert env["MASTER_ADDR"] == "job-a-trainer-0.job-a-trainer.ns.svc"
        assert (env["NNODES"], env["NPROC_PER_NODE"], env["WORLD_SIZE"]) == ("2", "8", "16")
        assert env["NODE_RANK"] == str(rank)
        assert env["DRESSAGE_ROLLOUT_MAX_RETRIES"] == "3"
        assert env["NCCL_DEBUG"] == "WARN"
        assert env["DRESSAGE_ENGINE_URLS"].split(",")[3] == (
            "http://job-a-engine-3.job-a-engine.ns.svc:30000"
        )
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
        assert container["command"][:1] == ["torchrun"]
        assert "--node-rank=$(NODE_RANK)" in container["command"]
        assert container["command"][-5:] == [
            "-m",
            "dressage",
            "train",
            "--config",
            naming.CONFIG_PATH,
        ]
        assert pod["metadata"]["labels"][naming.LABEL_GANG] == "2"
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports == {"rendezvous": 29500, "metrics": 9400}


def test_engines_and_proxy_flags() -> None:
    job = load_job(EXAMPLES[0].parent / "multi-node-partial-rollout.yaml")
    engine = children.build_engine_pod(job, OWNER, CONFIG, 1)
    cmd = engine["spec"]["containers"][0]["command"]
    assert cmd[:3] == ["python", "-m", "sglang.launch_server"]
    flags = dict(zip(cmd[3::2], cmd[4::2], strict=False))
    assert flags["--model-path"] == "/dressage/models/Qwen--Qwen3-8B"
    assert flags["--tp-size"] == "2"
    # A fresh engine reports the trainer's label of its initial weights (the data layer's
    # INITIAL_VERSION; the trainer's side is pinned in test_trainer_step), or the staleness
    # window would take the base model for a version of its own.
    assert flags["--weight-version"] == INITIAL_VERSION == "v0"
    # Engines of a warm-started job start on weights that are not the trainer's v0: their
    # label is one the trainer never issues, so the proxy holds them out until synced.
    warm = job.model_copy(deep=True)
    warm.spec.model.warm_start = WarmStartSpec()
    warm_cmd = children.engine_command(warm)
    assert warm_cmd[warm_cmd.index("--weight-version") + 1] == "base"
    assert cmd[-4:] == ["--mem-fraction-static", "0.85", "--context-length", "32768"]
    assert engine["spec"]["restartPolicy"] == "Always"
    proxy = children.build_proxy_deployment(job, OWNER, CONFIG)
    assert proxy["spec"]["replicas"] == 1
    # One proxy at a time, also while its template rolls out: sessions live in its memory.
    assert proxy["spec"]["strategy"] == {"type": "Recreate"}
    pcmd = proxy["spec"]["template"]["spec"]["containers"][0]["command"]
    assert pcmd[:4] == ["python", "-m", "dressage", "proxy"]
    assert "--engine-urls" not in pcmd
    assert pcmd[pcmd.index("--engine-urls-file") + 1] == naming.ENGINES_PATH
    config = children.build_config_map(job, OWNER)
    assert parse_engine_urls(config["data"][naming.ENGINES_KEY]) == [
        f"http://job-a-engine-{i}.job-a-engine.ns.svc:30000" for i in range(4)
    ]
    loaded = AsyncRLJob.model_validate(yaml.safe_load(config["data"][naming.CONFIG_KEY]))
    # The runtime reads the staged copy of the hub model; the rest of the spec is the job's.
    assert loaded.spec.model.source == "/dressage/models/Qwen--Qwen3-8B"
    assert loaded.spec.model_copy(update={"model": job.spec.model}) == job.spec


def _hub_job(**model: Any) -> AsyncRLJob:
    return AsyncRLJob.model_validate(
        {
            "metadata": {"name": "job-a"},
            "spec": {
                "model": {"source": "meta-llama/Llama-3.1-8B", **model},
                "storage": {"persistentVolumeClaim": "shared", "mountPath": "/data"},
            },
        }
    )


def _pod_specs(job: AsyncRLJob) -> dict[str, dict[str, Any]]:
    deployment = children.build_proxy_deployment(job, OWNER, CONFIG)
    return {
        "trainer": children.build_trainer_pods(job, OWNER, CONFIG, gang=0)[0]["spec"],
        "engine": children.build_engine_pod(job, OWNER, CONFIG, 0)["spec"],
        "proxy": deployment["spec"]["template"]["spec"],
    }


def test_a_hub_model_is_staged_before_any_pod_reads_it_and_only_staging_sees_the_token() -> None:
    job = _hub_job(revision="v1.0", tokenSecret={"name": "hf", "key": "token"})
    staged = "/data/models/meta-llama--Llama-3.1-8B@v1.0"
    assert children.model_path(job) == staged
    for role, spec in _pod_specs(job).items():
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
    specs = _pod_specs(job)
    engine_cmd = specs["engine"]["containers"][0]["command"]
    assert engine_cmd[engine_cmd.index("--model-path") + 1] == staged
    proxy_cmd = specs["proxy"]["containers"][0]["command"]
    assert proxy_cmd[proxy_cmd.index("--model") + 1] == staged
    manifest = yaml.safe_load(children.build_config_map(job, OWNER)["data"][naming.CONFIG_KEY])
    assert manifest["spec"]["model"]["source"] == staged
    for obj in _all_children(job):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_an_offline_hub_model_is_staged_from_the_cache_only() -> None:
    for offline in (False, True):
        job = _hub_job(hubOffline=offline)
        for role, spec in _pod_specs(job).items():
            (init,) = spec["initContainers"]
            env = {e["name"]: e.get("value") for e in init["env"]}
            assert env["HF_HOME"] == "/data/models/.hf-home", role
            assert ("HF_HUB_OFFLINE" in env) is offline, role
            if offline:
                assert env["HF_HUB_OFFLINE"] == "1"
            for container in spec["containers"]:
                assert "HF_HUB_OFFLINE" not in str(container), role


def test_a_model_on_a_path_is_read_in_place_without_staging() -> None:
    job = _hub_job()
    job.spec.model.source = "/data/checkpoints/base"
    job.spec.model.tokenizer = "/data/tokenizers/base"
    for spec in _pod_specs(job).values():
        assert "initContainers" not in spec
    proxy_cmd = _pod_specs(job)["proxy"]["containers"][0]["command"]
    assert proxy_cmd[proxy_cmd.index("--model") + 1] == "/data/tokenizers/base"
    public = _hub_job()
    assert "HF_TOKEN" not in str(_pod_specs(public)["trainer"]["initContainers"])


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


def test_rbac_rules_are_valid_and_least_privilege() -> None:
    kubernetes_validate.validate(cluster_role(), K8S_VERSION, strict=True)
    verbs: dict[tuple[str, str], set[str]] = {}
    for r in CLUSTER_RULES:
        for group in r["apiGroups"]:
            for res in r["resources"]:
                verbs.setdefault((group, res), set()).update(r["verbs"])
    # The only update: on the jobs' finalizers, which setting blockOwnerDeletion on the
    # children's owner references requires.
    assert [key for key, v in verbs.items() if "update" in v] == [
        ("dressage.io", "asyncrljobs/finalizers")
    ]
    assert OWNER.reference()["blockOwnerDeletion"] is True
    assert verbs[("", "pods")] == {"get", "list", "watch", "create", "delete"}
    assert "*" not in str(CLUSTER_RULES)


README = Path(__file__).resolve().parents[2] / "operator" / "README.md"
ENV_NAME = re.compile(r"`([A-Z][A-Z0-9_]{3,})(?:=[^`]*)?`")


def test_readme_lists_the_trainer_environment_the_builders_set() -> None:
    text = README.read_text()
    trainer = text[text.index("- trainer `") : text.index("- engine `")]
    listed = set(ENV_NAME.findall(trainer))
    job = load_job(EXAMPLES[0].parent / "multi-node-partial-rollout.yaml")
    assert listed == set(children.trainer_env(job, OWNER, 0))


def test_readme_lists_the_operator_variables_config_reads() -> None:
    listed = {n for n in ENV_NAME.findall(README.read_text()) if n.startswith("DRESSAGE_OPERATOR_")}
    assert len(listed) == len(dataclasses.fields(OperatorConfig))
    values = {
        "PORT": "1234",
        "SECONDS": "7.5",
        "TEMPLATE": "http://x/{job}",
        "POLICIES": "true",
        "LIMITS": '{"trainerNodes": 3}',
        "CYCLE": "7",
    }
    for name in listed:
        value = next((v for k, v in values.items() if name.endswith(k)), "registry/image:1")
        assert OperatorConfig.from_env({name: value}) != OperatorConfig(), f"{name} is not read"


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


def test_seeded_sampling_turns_on_sglangs_deterministic_inference() -> None:
    """Only with a release that has the flag (the job model refuses seededSampling on 0.5.2,
    whose parser has no `--enable-deterministic-inference`), and only when asked for."""
    base = load_job(EXAMPLES[0].parent / "single-node-gpu.yaml").to_wire()
    assert "--enable-deterministic-inference" not in children.engine_command(
        AsyncRLJob.model_validate(base)
    )
    spec = dict(base["spec"])  # type: ignore[arg-type]
    spec["rollout"] = {**spec.get("rollout", {}), "seededSampling": True}
    spec["inference"] = {**spec.get("inference", {}), "sglangVersion": "0.5.3"}
    seeded = children.engine_command(AsyncRLJob.model_validate({**base, "spec": spec}))
    assert seeded.count("--enable-deterministic-inference") == 1


def test_engine_probes_tolerate_model_load_and_weight_update_pauses() -> None:
    """The startup probe proves a generation works and waits out a long model load; liveness
    and readiness never hit SGLang's generation check, which blocks while a weight update
    pauses generation, and no probe times out within the ~1 s that check takes."""
    job = load_job(EXAMPLES[0].parent / "single-node-gpu.yaml")
    (container,) = children.build_engine_pod(job, OWNER, CONFIG, 0)["spec"]["containers"]
    startup = container["startupProbe"]
    assert startup["httpGet"]["path"] in ("/health", "/health_generate")
    assert startup["timeoutSeconds"] > 20  # SGLANG_HEALTH_CHECK_TIMEOUT's default
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 30 * 60
    for kind in ("livenessProbe", "readinessProbe"):
        probe = container[kind]
        assert probe["httpGet"]["path"] not in ("/health", "/health_generate"), kind
        assert probe.get("timeoutSeconds", 1) > 1, kind
        assert probe["periodSeconds"] * probe["failureThreshold"] >= 30, kind


def test_every_pod_can_write_the_shared_claim_as_the_runtime_user() -> None:
    job = _hub_job()
    for role, spec in _pod_specs(job).items():
        (storage,) = [v for v in spec["volumes"] if v["name"] == "storage"]
        assert storage["persistentVolumeClaim"] == {"claimName": "shared"}, role
        assert spec["securityContext"]["fsGroup"] == 1000, role


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_pod_meets_the_restricted_pod_security_standard(example: Path) -> None:
    job = load_job(example)
    job.spec.storage.persistent_volume_claim = "shared"
    for role, spec in _pod_specs(job).items():
        assert restricted_violations(spec) == [], role
        assert spec["automountServiceAccountToken"] is False, role
        assert spec["securityContext"]["runAsUser"] == 1000, role


def test_baseline_is_the_explicit_relaxation_for_gpu_images() -> None:
    """An engine image that must run as root with IPC_LOCK: the role says so in its template;
    the other roles stay restricted."""
    job = _hub_job()
    job.spec.inference.template.security = PodSecuritySpec(
        profile="baseline", add_capabilities=["IPC_LOCK"]
    )
    specs = _pod_specs(job)
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


def test_the_proxy_token_reaches_exactly_the_proxy_and_the_trainers_by_reference() -> None:
    job = _hub_job()
    job.spec.proxy.token_secret = SecretKeySelector(name="proxy-auth", key="token")
    ref = {"secretKeyRef": {"name": "proxy-auth", "key": "token"}}
    specs = _pod_specs(job)
    for role, spec in specs.items():
        env = [e for c in spec["containers"] for e in c["env"]]
        token = [e for e in env if e["name"] == "DRESSAGE_PROXY_TOKEN"]
        expected = [] if role == "engine" else [{"name": "DRESSAGE_PROXY_TOKEN", "valueFrom": ref}]
        assert token == expected, role
        for init in spec.get("initContainers", []):
            assert "DRESSAGE_PROXY_TOKEN" not in str(init)
    config = children.build_config_map(job, OWNER)
    manifest = yaml.safe_load(config["data"][naming.CONFIG_KEY])
    assert manifest["spec"]["proxy"]["tokenSecret"] == {"name": "proxy-auth", "key": "token"}
    with pytest.raises(ValidationError, match="DRESSAGE_PROXY_TOKEN is set by the operator"):
        PodTemplateOverrides.model_validate(
            {"env": [{"name": "DRESSAGE_PROXY_TOKEN", "value": "plain"}]}
        )
    assert train_cli.PROXY_TOKEN_ENV == proxy_cli._TOKEN_ENV == children.PROXY_TOKEN_ENV


def test_the_network_policy_admits_only_the_jobs_own_pods_to_engines_and_proxy() -> None:
    job = _hub_job()
    assert "NetworkPolicy" not in [o["kind"] for o in children.build_infrastructure(job, OWNER)]
    on = dataclasses.replace(CONFIG, network_policies=True)
    (policy,) = [
        o for o in children.build_infrastructure(job, OWNER, on) if o["kind"] == "NetworkPolicy"
    ]
    kubernetes_validate.validate(policy, K8S_VERSION, strict=True)
    spec = policy["spec"]
    assert spec["podSelector"]["matchLabels"] == {naming.LABEL_JOB: "job-a"}
    (expr,) = spec["podSelector"]["matchExpressions"]
    assert (expr["key"], sorted(expr["values"])) == (naming.LABEL_ROLE, ["inference", "proxy"])
    assert spec["ingress"] == [
        {"from": [{"podSelector": {"matchLabels": {naming.LABEL_JOB: "job-a"}}}]}
    ]
    assert spec["policyTypes"] == ["Ingress"]


def _distributed_job(**spec: Any) -> AsyncRLJob:
    return AsyncRLJob.model_validate(
        {
            "metadata": {"name": "job-a"},
            "spec": {
                "model": {"source": "meta-llama/Llama-3.1-8B"},
                "inference": {
                    "replicas": 3,
                    "tensorParallelSize": 2,
                    "weightSync": "distributed",
                    "weightSyncPort": 29700,
                },
                **spec,
            },
        }
    )


def test_distributed_sync_wires_the_weight_update_group_between_trainer_rank_0_and_engines() -> (
    None
):
    """Trainer rank 0's stable name and a declared port; 1 + 3 engines x 2 TP ranks; the
    trainer's own wiring and sender arrive at the same group from the environment given."""
    from dressage.orchestrator.pipeline import weight_sync_wiring
    from dressage.orchestrator.weight_sync import DistributedWeightSender

    job = _distributed_job()
    rendezvous = children.weight_sync_rendezvous(job, OWNER)
    assert rendezvous.master_address == "job-a-trainer-0.job-a-trainer.ns.svc"
    assert (rendezvous.master_port, rendezvous.world_size) == (29700, 7)
    assert rendezvous.rank_offsets == (1, 3, 5)
    assert (rendezvous.group_name, rendezvous.backend) == ("weight_update_group", "nccl")

    trainer = children.build_trainer_pods(job, OWNER, CONFIG, gang=0)[0]
    (container,) = trainer["spec"]["containers"]
    env = _env(container)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports[naming.WEIGHT_SYNC_PORT_NAME] == 29700
    service = children.build_trainer_service(job, OWNER)
    assert {"name": "weight-sync", "port": 29700, "targetPort": 29700} in service["spec"]["ports"]
    assert (env["NCCL_CUMEM_ENABLE"], env["NCCL_DEBUG"]) == ("0", "WARN")
    (engine,) = children.build_engine_pod(job, OWNER, CONFIG, 0)["spec"]["containers"]
    assert _env(engine)["NCCL_CUMEM_ENABLE"] == "0"

    import torch

    wiring = train_cli.resolve_wiring(_train_args(), env)

    sync = weight_sync_wiring(
        job.spec, wiring.weight_sync_address, wiring.weight_sync_port, torch.device("cuda")
    )
    assert sync is not None
    assert (sync.master_address, sync.master_port) == (
        rendezvous.master_address,
        rendezvous.master_port,
    )
    assert sync.backend == rendezvous.backend
    sender = DistributedWeightSender(
        wiring.engine_urls,
        master_address=sync.master_address,
        master_port=sync.master_port,
        backend=sync.backend,
        ranks_per_engine=sync.ranks_per_engine,
    )
    assert sender.world_size == rendezvous.world_size
    assert tuple(sender.rank_offsets) == rendezvous.rank_offsets


def _train_args() -> Any:
    import argparse

    parser = argparse.ArgumentParser()
    train_cli.add_arguments(parser)
    return parser.parse_args([])


def test_disk_sync_declares_no_weight_sync_port_or_environment() -> None:
    job = _hub_job()
    (container,) = children.build_trainer_pods(job, OWNER, CONFIG, gang=0)[0]["spec"]["containers"]
    assert naming.WEIGHT_SYNC_PORT_NAME not in {p["name"] for p in container["ports"]}
    assert not {"DRESSAGE_WEIGHT_SYNC_ADDRESS", "NCCL_CUMEM_ENABLE"} & set(_env(container))


def test_a_one_node_distributed_job_without_a_claim_gets_storage_of_its_own_per_pod() -> None:
    job = _distributed_job(trainer={"nodes": 1, "gpusPerNode": 1})
    for obj in _all_children(job):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    for role, spec in _pod_specs(job).items():
        (storage,) = [v for v in spec["volumes"] if v["name"] == "storage"]
        assert storage == {"name": "storage", "emptyDir": {}}, role
