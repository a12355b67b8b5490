"""`spec.staleness.mode` and `spec.staleness.budget`: `auto` takes a budget in versions (and an
optional mismatch-KL ceiling) and chooses the window itself; every refusal names the field."""

from __future__ import annotations

from typing import Any

import pytest

from dressage.api import JobValidationError, validate_job
from dressage.api.budget import StalenessBudget, StalenessMode


def _job(staleness: dict[str, Any], rollout: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"model": {"source": "builtin:tiny"}, "staleness": staleness}
    if rollout is not None:
        spec["rollout"] = rollout
    return {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": "budget"},
        "spec": spec,
    }


def test_the_spec_default_stays_fixed_so_a_job_that_says_nothing_keeps_its_meaning() -> None:
    staleness = validate_job(_job({})).spec.staleness
    assert staleness.mode is StalenessMode.FIXED
    assert not staleness.auto
    assert staleness.budget is None


def test_auto_takes_the_budget_in_versions_and_an_optional_kl_ceiling() -> None:
    staleness = validate_job(
        _job({"mode": "auto", "budget": {"maxLagVersions": 3, "maxMismatchKL": 0.01}})
    ).spec.staleness
    assert staleness.auto
    assert staleness.effective_budget == StalenessBudget(max_lag_versions=3, max_mismatch_kl=0.01)
    wire = validate_job(_job({"mode": "auto", "budget": {"maxMismatchKL": 0.02}})).to_wire()
    assert wire["spec"]["staleness"]["budget"] == {"maxLagVersions": 2, "maxMismatchKL": 0.02}


def test_auto_without_a_budget_keeps_the_default_budget() -> None:
    staleness = validate_job(_job({"mode": "auto"})).spec.staleness
    assert staleness.effective_budget.max_lag_versions == 2
    assert staleness.effective_budget.max_mismatch_kl is None


@pytest.mark.parametrize(
    ("staleness", "rollout", "field", "words"),
    [
        ({"budget": {"maxLagVersions": 2}}, None, "spec.staleness", "staleness.budget"),
        ({"mode": "auto", "keepVersions": 2}, None, "spec.staleness", "staleness.keepVersions"),
        ({"mode": "auto", "admission": False}, None, "spec.staleness", "staleness.admission"),
        ({"mode": "auto"}, {"mode": "sync"}, "spec", "rollout.mode"),
        (
            {"mode": "auto", "budget": {"maxLagVersions": 0}},
            None,
            "maxLagVersions",
            "greater than or equal to 1",
        ),
        (
            {"mode": "auto", "budget": {"maxMismatchKL": 0.0}},
            None,
            "maxMismatchKL",
            "greater than 0",
        ),
        ({"mode": "sometimes"}, None, "spec.staleness.mode", "fixed"),
    ],
)
def test_a_refused_budget_names_the_field_at_fault(
    staleness: dict[str, Any], rollout: dict[str, Any] | None, field: str, words: str
) -> None:
    with pytest.raises(JobValidationError) as caught:
        validate_job(_job(staleness, rollout))
    assert any(
        field in path and words in f"{path} {message}" for path, message in caught.value.errors
    ), caught.value.errors
