"""The proxy's Deployment and its bearer token."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml
from dressage_operator import children, naming
from pydantic import ValidationError

from dressage.api import load_job
from dressage.api.job import (
    PodTemplateOverrides,
    SecretKeySelector,
)
from dressage.orchestrator import train_cli
from dressage.proxy import cli as proxy_cli

from .support import CONFIG, EXAMPLES, K8S_VERSION, OWNER, env_of, hub_job, pod_specs


def test_one_proxy_follows_the_engine_list_file() -> None:
    job = load_job(EXAMPLES[0].parent / "multi-node-partial-rollout.yaml")
    proxy = children.build_proxy_deployment(job, OWNER, CONFIG)
    assert proxy["spec"]["replicas"] == 1
    # One proxy at a time, also while its template rolls out: sessions live in its memory.
    assert proxy["spec"]["strategy"] == {"type": "Recreate"}
    pcmd = proxy["spec"]["template"]["spec"]["containers"][0]["command"]
    assert pcmd[:4] == ["python", "-m", "dressage", "proxy"]
    assert "--engine-urls" not in pcmd
    assert pcmd[pcmd.index("--engine-urls-file") + 1] == naming.ENGINES_PATH


def test_the_proxy_token_reaches_the_proxy_trainers_and_engines_by_reference() -> None:
    # The engines call the proxy's drain from their preStop hook.
    job = hub_job()
    job.spec.proxy.token_secret = SecretKeySelector(name="proxy-auth", key="token")
    ref = {"secretKeyRef": {"name": "proxy-auth", "key": "token"}}
    specs = pod_specs(job)
    for role, spec in specs.items():
        env = [e for c in spec["containers"] for e in c["env"]]
        token = [e for e in env if e["name"] == "DRESSAGE_PROXY_TOKEN"]
        assert token == [{"name": "DRESSAGE_PROXY_TOKEN", "valueFrom": ref}], role
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


def test_several_proxy_replicas_are_rendered_behind_a_headless_service_of_ready_pods() -> None:
    job = hub_job()
    job.spec.proxy.replicas = 3
    deployment = children.build_proxy_deployment(job, OWNER, CONFIG)
    assert deployment["spec"]["replicas"] == 3
    services = {
        o["metadata"]["name"]: o
        for o in children.build_infrastructure(job, OWNER)
        if o["kind"] == "Service"
    }
    replicas = services[naming.proxy_replicas_service("job-a")]
    cluster_ip = services[naming.proxy("job-a")]
    for service in (replicas, cluster_ip):
        kubernetes_validate.validate(service, K8S_VERSION, strict=True)
        # Both select exactly the proxy Deployment's pods.
        assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= labels.items()
    assert replicas["spec"]["clusterIP"] == "None"
    # A starting replica is not hashed onto: only ready pods are in its answers.
    assert replicas["spec"]["publishNotReadyAddresses"] is False
    assert cluster_ip["spec"]["type"] == "ClusterIP"
    kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


def test_trainers_and_engines_reach_every_replica_through_the_headless_service() -> None:
    one = hub_job()
    many = hub_job()
    many.spec.proxy.replicas = 2
    expected = {
        1: "http://job-a-proxy.ns.svc:8000",
        2: "dns+http://job-a-proxy-replicas.ns.svc:8000",
    }
    for job in (one, many):
        specs = pod_specs(job)
        for role in ("trainer", "engine"):
            env = env_of(specs[role]["containers"][0])
            assert env["DRESSAGE_PROXY_URL"] == expected[job.spec.proxy.replicas], role
    # Going from one proxy to several changes that address: the trainer gang and the engines
    # are replaced; the count among several is not in their hash (the DNS answer follows it).
    assert children.trainer_spec_hash(one) != children.trainer_spec_hash(many)
    assert children.engine_spec_hash(one) != children.engine_spec_hash(many)
    more = hub_job()
    more.spec.proxy.replicas = 4
    assert children.trainer_spec_hash(more) == children.trainer_spec_hash(many)
    assert children.engine_spec_hash(more) == children.engine_spec_hash(many)
