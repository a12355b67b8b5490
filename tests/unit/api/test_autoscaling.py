"""`spec.inference.autoscaling`: an HPA's `behavior` with an HPA's bounds and defaults, bounds
that must be ordered, and the weight sync it needs; the error names the field."""

from __future__ import annotations

from typing import Any

import pytest

from dressage.api import JobValidationError, validate_job
from dressage.api.autoscaling import AutoscalingSpec, ScalingBehavior


def _job(inference: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": "auto"},
        "spec": {"model": {"source": "builtin:tiny"}, "inference": inference},
    }


def test_the_defaults_are_an_hpas() -> None:
    """`autoscaling/v2` defaults (`SetDefaults_HorizontalPodAutoscalerBehavior`): scale up at
    once by 4 pods or 100 % per 15 s, the larger; scale down after 300 s, by 100 % per 15 s."""
    behavior = ScalingBehavior()
    up, down = behavior.up(), behavior.down()
    assert (up.stabilization_window_seconds, up.select_policy) == (0, "Max")
    assert [(p.type, p.value, p.period_seconds) for p in up.policies or []] == [
        ("Pods", 4, 15),
        ("Percent", 100, 15),
    ]
    assert (down.stabilization_window_seconds, down.select_policy) == (300, "Max")
    assert [(p.type, p.value, p.period_seconds) for p in down.policies or []] == [
        ("Percent", 100, 15)
    ]


def test_a_rule_given_in_part_keeps_the_directions_defaults_for_the_rest() -> None:
    behavior = ScalingBehavior.model_validate({"scaleDown": {"stabilizationWindowSeconds": 60}})
    assert behavior.down().stabilization_window_seconds == 60
    assert [p.type for p in behavior.down().policies or []] == ["Percent"]
    assert behavior.up().stabilization_window_seconds == 0


@pytest.mark.parametrize(
    ("autoscaling", "field"),
    [
        ({"minReplicas": 4, "maxReplicas": 2}, "spec.inference.autoscaling"),
        ({"minReplicas": 0, "maxReplicas": 2}, "spec.inference.autoscaling.minReplicas"),
        (
            {"minReplicas": 1, "maxReplicas": 2, "scaleUpWaitFraction": 1.0},
            "spec.inference.autoscaling.scaleUpWaitFraction",
        ),
        (
            {
                "minReplicas": 1,
                "maxReplicas": 2,
                "behavior": {"scaleUp": {"stabilizationWindowSeconds": 3601}},
            },
            "spec.inference.autoscaling.behavior.scaleUp.stabilizationWindowSeconds",
        ),
        (
            {"minReplicas": 1, "maxReplicas": 2, "behavior": {"scaleDown": {"policies": []}}},
            "spec.inference.autoscaling.behavior.scaleDown.policies",
        ),
        (
            {
                "minReplicas": 1,
                "maxReplicas": 2,
                "behavior": {
                    "scaleUp": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 1801}]}
                },
            },
            "spec.inference.autoscaling.behavior.scaleUp.policies[0].periodSeconds",
        ),
    ],
)
def test_a_bad_autoscaling_value_is_refused_naming_the_field(
    autoscaling: dict[str, Any], field: str
) -> None:
    with pytest.raises(JobValidationError) as caught:
        validate_job(_job({"autoscaling": autoscaling}))
    assert field in [path for path, _ in caught.value.errors], caught.value.errors


def test_autoscaling_works_with_either_weight_sync() -> None:
    """An engine joins and leaves the `distributed` weight updates between publishes (one
    group per engine), so autoscaling is not limited to `disk`."""
    bounds = {"minReplicas": 1, "maxReplicas": 2}
    for sync in ("disk", "distributed"):
        job = validate_job(_job({"autoscaling": bounds, "weightSync": sync}))
        assert job.spec.inference.autoscaling is not None


def test_a_starting_count_outside_the_bounds_is_accepted_and_clamped() -> None:
    """The model takes `replicas` as given (an update outside the bounds is the CRD's
    transition rule to refuse); the operator brings the count within the bounds."""
    job = validate_job(_job({"replicas": 1, "autoscaling": {"minReplicas": 2, "maxReplicas": 5}}))
    autoscaling = job.spec.inference.autoscaling
    assert isinstance(autoscaling, AutoscalingSpec)
    assert [autoscaling.clamp(n) for n in (1, 3, 9)] == [2, 3, 5]
