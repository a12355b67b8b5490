"""The ConfigMap (job manifest and engine list), the Services and the NetworkPolicy."""

from __future__ import annotations

import dataclasses

import kubernetes_validate
import yaml
from dressage_operator import children, naming

from dressage.api import AsyncRLJob, load_job
from dressage.proxy.config import parse_engine_urls

from .support import CONFIG, EXAMPLES, K8S_VERSION, OWNER, hub_job


def test_the_config_map_lists_the_engines_and_the_manifest_reads_the_staged_model() -> None:
    job = load_job(EXAMPLES[0].parent / "multi-node-partial-rollout.yaml")
    config = children.build_config_map(job, OWNER)
    assert parse_engine_urls(config["data"][naming.ENGINES_KEY]) == [
        f"http://job-a-engine-{i}.job-a-engine.ns.svc:30000" for i in range(4)
    ]
    loaded = AsyncRLJob.model_validate(yaml.safe_load(config["data"][naming.CONFIG_KEY]))
    # The runtime reads the staged copy of the hub model; the rest of the spec is the job's.
    assert loaded.spec.model.source == "/dressage/models/Qwen--Qwen3-8B"
    assert loaded.spec.model_copy(update={"model": job.spec.model}) == job.spec


def test_the_network_policy_admits_only_the_jobs_own_pods_to_engines_and_proxy() -> None:
    job = hub_job()
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
