"""Per-release choices of the operator: the engines' probe route, and the untested-release
condition with its one Warning Event, through `sglang_release` and through `decide`."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from dressage_operator import children, sglang_release
from dressage_operator.children import Owner
from dressage_operator.config import OperatorConfig
from dressage_operator.decide import decide
from dressage_operator.plan import Observed, Plan

from dressage.api import AsyncRLJob, validate_job
from dressage.api.sglang import (
    SGLANG_NEWEST_TESTED,
    SGLANG_OLDEST_TESTED,
    SGLANG_TESTED_RANGE,
    SGLANG_TESTED_RELEASES,
)
from dressage.api.status import AsyncRLJobStatus, Condition

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
OWNER = Owner(name="job-a", namespace="ns", uid="u")
UNTESTED = "0.6.1"


def _job(**inference: object) -> AsyncRLJob:
    return validate_job(
        {
            "apiVersion": "dressage.io/v1alpha1",
            "kind": "AsyncRLJob",
            "metadata": {"name": "job-a"},
            "spec": {"model": {"source": "builtin:tiny"}, "inference": inference},
        }
    )


def _decide(job: AsyncRLJob, status: AsyncRLJobStatus | None = None) -> Plan:
    observed = Observed(generation=1, status=status or AsyncRLJobStatus(), now=NOW)
    return decide(job, OWNER, OperatorConfig(), observed)


def _untested(plan: Plan) -> Condition:
    return next(c for c in plan.status.conditions if c.type == "SGLangReleaseUntested")


@pytest.mark.parametrize(
    ("version", "route"),
    [
        ("0.5.2", "/get_model_info"),
        ("0.5.5", "/get_model_info"),
        ("0.5.6", "/model_info"),
        ("0.5.23", "/model_info"),
        ("0.6.1", "/model_info"),
    ],
)
def test_liveness_and_readiness_use_the_route_of_the_release_that_logs_nothing(
    version: str, route: str
) -> None:
    """0.5.6 adds `/model_info` and makes `/get_model_info` a deprecated alias that logs a
    warning per call; the startup probe generates one token in every release."""
    (container,) = children.build_engine_pod(
        _job(sglangVersion=version), OWNER, OperatorConfig(), 0
    )["spec"]["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == route
    assert container["readinessProbe"]["httpGet"]["path"] == route
    assert container["startupProbe"]["httpGet"]["path"] == "/health_generate"


def test_the_default_job_probes_the_newest_tested_releases_route() -> None:
    (container,) = children.build_engine_pod(_job(), OWNER, OperatorConfig(), 0)["spec"][
        "containers"
    ]
    path = container["livenessProbe"]["httpGet"]["path"]
    assert path == sglang_release.engine_live_check(SGLANG_NEWEST_TESTED) == "/model_info"


@pytest.mark.parametrize("version", [*SGLANG_TESTED_RELEASES, "0.5.20"])
def test_a_release_in_the_tested_range_is_not_untested(version: str) -> None:
    check = sglang_release.check(version, None)
    assert (check.untested, check.reason, check.warn) == (False, "InTestedRange", False)
    assert SGLANG_TESTED_RANGE in check.message


def test_an_untested_release_warns_once_naming_the_tested_range() -> None:
    first = sglang_release.check(UNTESTED, None)
    assert (first.untested, first.reason, first.warn) == (True, "NewerThanTested", True)
    assert f"{SGLANG_OLDEST_TESTED} to {SGLANG_NEWEST_TESTED}" in first.message
    assert UNTESTED in first.message
    held = Condition(type="SGLangReleaseUntested", status="True", message=first.message)
    assert not sglang_release.check(UNTESTED, held).warn
    # Another untested release, or one that was tested before: a new warning.
    assert sglang_release.check("0.7.0", held).warn
    was_tested = Condition(type="SGLangReleaseUntested", status="False", message="")
    assert sglang_release.check(UNTESTED, was_tested).warn


def test_decide_sets_the_condition_and_posts_one_warning_event() -> None:
    plan = _decide(_job(sglangVersion=UNTESTED))
    condition = _untested(plan)
    assert (condition.status, condition.reason) == ("True", "NewerThanTested")
    assert SGLANG_TESTED_RANGE in condition.message
    warnings = [e for e in plan.events if e.reason == "NewerThanTested"]
    assert [(e.type, e.message) for e in warnings] == [("Warning", condition.message)]
    # The job still runs: pods are created as for any valid job.
    assert plan.create_pods
    again = _decide(_job(sglangVersion=UNTESTED), status=plan.status)
    assert _untested(again).status == "True"
    assert not [e for e in again.events if e.reason == "NewerThanTested"]


def test_decide_marks_a_tested_release_as_such_without_an_event() -> None:
    plan = _decide(_job())
    assert (_untested(plan).status, _untested(plan).reason) == ("False", "InTestedRange")
    assert not [e for e in plan.events if e.type == "Warning"]


def test_routine_polls_are_left_out_of_the_access_log_from_0_5_8() -> None:
    """`--uvicorn-access-log-exclude-prefixes` arrived in 0.5.8: older releases' parsers refuse
    it, so the flag is only on newer engines' command lines."""
    assert sglang_release.quiet_access_log_args("0.5.7") == []
    assert sglang_release.quiet_access_log_args("0.5.2") == []
    flag, *prefixes = sglang_release.quiet_access_log_args("0.5.8")
    assert flag == "--uvicorn-access-log-exclude-prefixes"
    assert sglang_release.quiet_access_log_args("0.5.23")[1:] == prefixes
    for path in (sglang_release.LIVE_CHECK, sglang_release.ENGINE_GENERATE_CHECK, "/metrics"):
        assert any(path.startswith(prefix) for prefix in prefixes), path
    assert not any("/generate".startswith(prefix) for prefix in prefixes)
