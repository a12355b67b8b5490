"""Helpers of the builders' tests: example jobs, an owner, every child of a job, pod specs
by role."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from dressage_operator import children
from dressage_operator.config import OperatorConfig

from dressage.api import AsyncRLJob
from dressage.orchestrator import train_cli

EXAMPLES = sorted((Path(__file__).resolve().parents[4] / "examples").glob("*.yaml"))


K8S_VERSION = "1.33.0"


CONFIG = OperatorConfig()


OWNER = children.Owner(name="job-a", namespace="ns", uid="uid-1")


def all_children(job: AsyncRLJob) -> list[dict[str, Any]]:
    return [
        *children.build_infrastructure(job, OWNER),
        children.build_proxy_deployment(job, OWNER, CONFIG),
        *children.build_trainer_pods(job, OWNER, CONFIG, gang=0),
        *children.build_engine_pods(job, OWNER, CONFIG),
    ]


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"]}


def hub_job(**model: Any) -> AsyncRLJob:
    return AsyncRLJob.model_validate(
        {
            "metadata": {"name": "job-a"},
            "spec": {
                "model": {"source": "meta-llama/Llama-3.1-8B", **model},
                "storage": {"persistentVolumeClaim": "shared", "mountPath": "/data"},
            },
        }
    )


def pod_specs(job: AsyncRLJob) -> dict[str, dict[str, Any]]:
    deployment = children.build_proxy_deployment(job, OWNER, CONFIG)
    return {
        "trainer": children.build_trainer_pods(job, OWNER, CONFIG, gang=0)[0]["spec"],
        "engine": children.build_engine_pod(job, OWNER, CONFIG, 0)["spec"],
        "proxy": deployment["spec"]["template"]["spec"],
    }


README = Path(__file__).resolve().parents[4] / "operator" / "README.md"


ENV_NAME = re.compile(r"`([A-Z][A-Z0-9_]{3,})(?:=[^`]*)?`")


def distributed_job(**spec: Any) -> AsyncRLJob:
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


def train_args() -> Any:
    import argparse

    parser = argparse.ArgumentParser()
    train_cli.add_arguments(parser)
    return parser.parse_args([])
