"""The proxy's Deployment and its bearer token."""

from __future__ import annotations

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

from .support import CONFIG, EXAMPLES, OWNER, hub_job, pod_specs


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


def test_the_proxy_token_reaches_exactly_the_proxy_and_the_trainers_by_reference() -> None:
    job = hub_job()
    job.spec.proxy.token_secret = SecretKeySelector(name="proxy-auth", key="token")
    ref = {"secretKeyRef": {"name": "proxy-auth", "key": "token"}}
    specs = pod_specs(job)
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
