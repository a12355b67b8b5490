"""The cluster's limits refuse a job naming the field, the value, the limit and the key."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from dressage_operator.config import OperatorConfig
from dressage_operator.decide import decide
from dressage_operator.limits import DEFAULT_LIMITS, LIMITS, limit_errors, parse_limits
from dressage_operator.plan import Observed
from dressage_operator.validation import spec_errors

from dressage.api.crd import render_crd
from dressage.api.status import AsyncRLJobStatus, JobPhase

from .support import CONFIG, NOW, OWNER, cluster_job


def _body(**spec: Any) -> dict[str, Any]:
    return cluster_job(**spec).to_wire()


def test_the_default_limits_refuse_a_large_job_naming_the_field() -> None:
    job, errors = spec_errors(_body(inference={"replicas": 65}), "ns/job-a")
    assert job is not None
    assert errors == ()
    (over,) = limit_errors(job.spec, CONFIG.limits)  # ...over this cluster's limit
    assert over[0] == "spec.inference.replicas"
    assert "65 is above this cluster's limit of 64" in over[1]
    assert "limits.inferenceReplicas" in over[1]
    obs = Observed(generation=1, status=AsyncRLJobStatus(), now=NOW, limit_errors=(over,))
    plan = decide(job, OWNER, CONFIG, obs)
    assert plan.invalid
    assert plan.create_pods == []
    cond = next(c for c in plan.status.conditions if c.type == "SpecValid")
    assert (cond.status, cond.reason) == ("False", "LimitExceeded")
    assert cond.message.startswith("spec.inference.replicas: 65 is above")
    # Brought under the limit, the job starts over.
    again = Observed(generation=2, status=plan.status, now=NOW)
    fixed = decide(cluster_job(inference={"replicas": 64}), OWNER, CONFIG, again)
    assert fixed.status.phase is JobPhase.PENDING
    assert len(fixed.create_pods) == CONFIG.max_creates_per_cycle  # 66 pods: 50 this cycle


def test_every_limit_bounds_its_field_and_is_raised_from_the_environment() -> None:
    raised = OperatorConfig.from_env(
        {"DRESSAGE_OPERATOR_LIMITS": json.dumps({"inferenceReplicas": 500, "trainerNodes": 40})}
    )
    assert raised.limits["inferenceReplicas"] == 500
    assert raised.limits["gpusPerNode"] == DEFAULT_LIMITS["gpusPerNode"]
    big = cluster_job(inference={"replicas": 500}, trainer={"nodes": 40, "gpusPerNode": 0})
    assert limit_errors(big.spec, raised.limits) == []
    assert [f for f, _ in limit_errors(big.spec, CONFIG.limits)] == [
        "spec.inference.replicas",
        "spec.trainer.nodes",
    ]
    crd = yaml.safe_load(render_crd())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    for limit in LIMITS:
        _, section, name = limit.field.split(".")
        maximum = spec["properties"][section]["properties"][name]["maximum"]
        assert limit.default <= maximum, limit.key  # the CRD carries a generous static maximum


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"engines": 5}', "unknown limit 'engines'"),
        ('{"trainerNodes": 0}', "trainerNodes must be a positive integer"),
        ('{"trainerNodes": "9"}', "trainerNodes must be a positive integer"),
        ("[1]", "not a JSON object"),
        ("{", "not a JSON object"),
    ],
)
def test_bad_limits_are_refused_at_startup_naming_the_key(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match="DRESSAGE_OPERATOR_LIMITS") as info:
        parse_limits(text)
    assert problem in str(info.value)


def test_the_model_and_the_crd_refuse_what_is_above_the_static_maximum() -> None:
    _, errors = spec_errors(
        _body() | {"spec": {**_body()["spec"], "inference": {"replicas": 5000}}}, "ns/a"
    )
    assert [f for f, _ in errors] == ["spec.inference.replicas"]
