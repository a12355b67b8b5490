"""The messages of a cycle: a write's result describes itself as the status and Events say it."""

from __future__ import annotations

from dressage_operator.plan import Applied, ChildResult


def test_a_refusal_names_the_child_the_verb_the_code_and_the_field_once() -> None:
    named = ChildResult(
        "Pod", "job-a-trainer-0", "create", Applied.REFUSED, 422, "spec.x: Invalid value", "spec.x"
    )
    assert named.describe() == (
        "Pod job-a-trainer-0: create refused (HTTP 422): spec.x: Invalid value"
    )
    unnamed = ChildResult(
        "Pod", "job-a-engine-0", "create", Applied.REFUSED, 403, "quota", "spec.y"
    )
    assert unnamed.describe() == (
        "Pod job-a-engine-0: create refused (HTTP 403): quota (field spec.y)"
    )


def test_a_child_of_another_owner_says_whose_it_is() -> None:
    result = ChildResult(
        "ConfigMap", "job-a-config", "create", Applied.NOT_OWNED, message="owned by uid x"
    )
    assert (
        result.describe() == "ConfigMap job-a-config exists and is not this job's: owned by uid x"
    )
