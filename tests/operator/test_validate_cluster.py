"""`dressage validate --cluster` decides as the operator does: each manifest the operator
refuses on the API emulation is refused offline, naming the same fields with the same message
the operator writes into the job's status; each it accepts passes.

The operator runs under kopf against the emulation (its default settings plus the module's
NetworkPolicies); `dressage validate --cluster` runs as the installed `dressage` command, with
the same `DRESSAGE_OPERATOR_*` settings, on every example under `examples/`, on each job of
`tests/manifests/refused-children.yaml` (children the API server would refuse), and on jobs
refused by the model, by a missing claim, by a limit, by the Pod Security admission and by a
namespace's ResourceQuota.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from dressage_testkit.kube import ENFORCE_LABEL, EmulatedCluster

from tests.manifests import HERE as MANIFESTS
from tests.manifests import REFUSED_CHILDREN

from .conftest import Operator
from .jobs import delete_jobs, job_manifest, pods_of, status_of
from .waiting import wait_until

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))
HEADER = re.compile(r"^(?P<path>.+): AsyncRLJob (?P<name>\S+) (?P<verdict>would be|is valid)")


@dataclass
class Verdict:
    """What `dressage validate --cluster` said of one job."""

    refused: bool
    stages: list[tuple[str, list[str]]] = field(default_factory=list)
    """(reason, `field: message` lines) per stage, in the order printed."""


@pytest.fixture(autouse=True)
def _delete_jobs_afterwards(cluster: EmulatedCluster) -> Iterator[None]:
    yield
    delete_jobs(cluster, (("v1", "pods"), ("apps/v1", "deployments")))


def _validate(operator: Operator, *args: str) -> tuple[int, dict[str, Verdict]]:
    """`dressage validate --cluster ARGS` as the console script, with the operator's
    settings; its exit code and its verdict by job name."""
    command = Path(sys.executable).parent / "dressage"
    assert command.is_file(), f"{command}: the console script is not installed"
    settings = {k: v for k, v in operator.env.items() if k.startswith("DRESSAGE_OPERATOR_")}
    done = subprocess.run(
        [str(command), "validate", "--cluster", "--namespace", "e2e", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **settings},
        check=False,
    )
    verdicts: dict[str, Verdict] = {}
    current: Verdict | None = None
    for line in (done.stderr + done.stdout).splitlines():
        header = HEADER.match(line)
        if header:
            current = Verdict(refused=header["verdict"] == "would be")
            verdicts[header["name"]] = current
        elif current is not None and current.refused and re.match(r"^  \w+: ", line):
            current.stages.append((line.split(":")[0].strip(), []))
        elif current is not None and current.refused and line.startswith("    "):
            current.stages[-1][1].append(line[4:])
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, verdicts


def _jobs(path: Path) -> list[dict[str, Any]]:
    docs = yaml.safe_load_all(path.read_text())
    jobs = [d for d in docs if isinstance(d, dict) and d.get("kind") == "AsyncRLJob"]
    for job in jobs:
        job["metadata"].pop("namespace", None)
    return jobs


def _decided(c: EmulatedCluster, name: str) -> dict[str, Any]:
    """The job's status once the operator decided on it: Failed, or its pods on the way."""

    def decided() -> dict[str, Any] | None:
        status = status_of(c, name)
        conditions = {x["type"]: x for x in status.get("conditions", [])}
        if status.get("phase") == "Failed" or "SpecValid" in conditions:
            return status
        return None

    status: dict[str, Any] = wait_until(
        decided, timeout=30, what=f"the operator's decision on {name}"
    )
    return status


def _assert_same_decision(c: EmulatedCluster, name: str, verdict: Verdict) -> None:
    """The operator's status says what the offline check said: refused at the same stage with
    the same message, or accepted."""
    status = _decided(c, name)
    conditions = {x["type"]: x for x in status.get("conditions", [])}
    if not verdict.refused:
        assert status.get("phase") != "Failed", (name, status.get("message"))
        assert conditions["SpecValid"]["status"] == "True", (name, conditions["SpecValid"])
        return
    reason, lines = verdict.stages[0]
    assert status.get("phase") == "Failed", (name, status)
    assert conditions["SpecValid"]["reason"] == reason, (name, conditions["SpecValid"])
    assert status["message"] == "invalid spec: " + "; ".join(lines), name


def test_every_example_passes_or_fails_as_the_operator_decides(
    cluster: EmulatedCluster, operator: Operator
) -> None:
    c = cluster
    code, verdicts = _validate(operator, *map(str, EXAMPLES))
    names = []
    for example in EXAMPLES:
        for job in _jobs(example):
            c.create(job)
            names.append(job["metadata"]["name"])
    assert sorted(verdicts) == sorted(names)
    assert code == (1 if any(v.refused for v in verdicts.values()) else 0)
    for name in names:
        _assert_same_decision(c, name, verdicts[name])


def test_children_the_api_server_would_refuse_are_refused_with_the_operators_message(
    cluster: EmulatedCluster, operator: Operator
) -> None:
    c = cluster
    path = MANIFESTS / "refused-children.yaml"
    code, verdicts = _validate(operator, str(path))
    assert code == 1
    for job in _jobs(path):
        c.create(job)
    for name, job_field in REFUSED_CHILDREN.items():
        verdict = verdicts[name]
        assert verdict.refused, name
        ((reason, lines),) = verdict.stages
        assert reason == "InvalidSpec"
        assert any(line.startswith(f"{job_field}: ") for line in lines), (name, lines)
        _assert_same_decision(c, name, verdict)


def test_a_bad_model_a_missing_claim_and_a_limit_are_refused_as_the_operator_refuses(
    cluster: EmulatedCluster, operator: Operator, tmp_path: Path
) -> None:
    c = cluster
    no_claim = job_manifest("no-claim")
    del no_claim["spec"]["storage"]
    jobs = {
        "typo": job_manifest("typo", trainer={"nodes": 1, "gpusPerNod": 0}),
        "no-claim": no_claim,
        "over-limit": job_manifest("over-limit", inference={"replicas": 65}),
    }
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump_all(list(jobs.values())))
    code, verdicts = _validate(operator, str(path))
    assert code == 1
    expected = {
        "typo": (
            "InvalidSpec",
            "spec.trainer.gpusPerNod: unknown field; did you mean gpusPerNode?",
        ),
        "no-claim": ("InvalidSpec", "spec.storage.persistentVolumeClaim: required on a cluster"),
        "over-limit": ("LimitExceeded", "spec.inference.replicas: 65 is above this cluster's"),
    }
    for name, job in jobs.items():
        c.create(job)
        verdict = verdicts[name]
        reason, lines = verdict.stages[0]
        assert (reason, lines[0][: len(expected[name][1])]) == expected[name], verdict
        _assert_same_decision(c, name, verdict)


def test_a_pod_the_pod_security_admission_refuses_is_named_as_the_api_server_names_it(
    cluster: EmulatedCluster, operator: Operator, tmp_path: Path
) -> None:
    """In a namespace enforcing `restricted`, an engine relaxed to `baseline` is refused by the
    admission; `--pod-security restricted` refuses it offline with the message the job's
    status quotes, and without the option (no level enforced) it passes."""
    c = cluster
    relaxed = {"replicas": 1, "template": {"security": {"profile": "baseline"}}}
    job = job_manifest("relaxed", inference=relaxed)
    path = tmp_path / "relaxed.yaml"
    path.write_text(yaml.safe_dump(job))
    code, verdicts = _validate(operator, str(path))
    assert (code, verdicts["relaxed"].refused) == (0, False)
    code, verdicts = _validate(operator, "--pod-security", "restricted", str(path))
    assert code == 1
    ((reason, lines),) = verdicts["relaxed"].stages
    assert reason == "ChildRefused"
    (line,) = lines
    assert line.startswith("spec.inference.template.security: Pod relaxed-engine-0: create ")
    message = line.split(": ", 1)[1]
    c.label_namespace({ENFORCE_LABEL: "restricted"})
    try:
        c.create(job)
        status = wait_until(
            lambda: status_of(c, "relaxed").get("phase") == "Failed" and status_of(c, "relaxed"),
            timeout=30,
            what="relaxed Failed",
        )
    finally:
        c.label_namespace({ENFORCE_LABEL: None})
    assert status["message"] == (
        f"refused by the API server: {message}; the operator tries again when the spec changes"
    )


def test_in_a_namespace_with_a_compute_quota_every_child_is_admitted_and_a_lack_is_named(
    cluster: EmulatedCluster, operator: Operator, tmp_path: Path
) -> None:
    """A ResourceQuota on requests and on `limits.memory`: a job whose roles give a memory
    limit gets every pod admitted, model staging and package installation included (their
    init containers take the main container's resources); one whose engines give none is
    refused, offline by `--resource-quota` and by the API server, naming the engine's
    containers, with the message the job's status quotes."""
    c = cluster
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "compute"},
        "spec": {"hard": {"requests.cpu": "64", "requests.memory": "1Ti", "limits.memory": "2Ti"}},
    }
    quota_file = tmp_path / "quota.yaml"  # as `kubectl get resourcequota -o yaml` prints it
    quota_file.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [quota]}))
    limited = {"resources": {"limits": {"memory": "4Gi"}}}
    staged = {"model": {"source": "org/model"}, "code": {"packages": ["numpy"]}}
    jobs = {
        "limited": job_manifest(
            "limited", trainer={**limited, "nodes": 2, "gpusPerNode": 0},
            inference={**limited, "replicas": 2}, proxy=limited, **staged,
        ),
        "unlimited": job_manifest(
            "unlimited", trainer={**limited, "nodes": 1, "gpusPerNode": 0},
            inference={"replicas": 1}, proxy=limited, **staged,
        ),
    }  # fmt: skip
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump_all(list(jobs.values())))
    code, verdicts = _validate(operator, "--resource-quota", str(quota_file), str(path))
    assert code == 1
    assert not verdicts["limited"].refused
    ((reason, lines),) = verdicts["unlimited"].stages
    assert reason == "ChildRefused"
    (line,) = lines
    assert line.startswith("spec.inference.resources: Pod unlimited-engine-0: create refused ")
    assert line.endswith(
        "failed quota: compute: must specify limits.memory for: sglang,stage-model"
    )
    message = line.split(": ", 1)[1]
    c.create(quota)
    try:
        for job in jobs.values():
            c.create(job)
        wait_until(
            lambda: len(pods_of(c, "limited")) == 4, timeout=30, what="limited's 4 pods admitted"
        )
        status = wait_until(
            lambda: (
                status_of(c, "unlimited").get("phase") == "Failed" and status_of(c, "unlimited")
            ),
            timeout=30,
            what="unlimited Failed",
        )
        assert status_of(c, "limited").get("phase") != "Failed"
        for index in range(2):
            assert c.refusals("Pod", f"limited-trainer-{index}") == 0
            assert c.refusals("Pod", f"limited-engine-{index}") == 0
    finally:
        c.delete(c.path("v1", "resourcequotas", "compute"))
    assert status["message"] == (
        f"refused by the API server: {message}; the operator tries again when the spec changes"
    )
