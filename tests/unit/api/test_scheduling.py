"""`spec.scheduling`: a queue name that is a label value, a priority class that is a DNS-1123
subdomain, both optional and ignored by `dressage run`."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dressage.api.scheduling import SchedulingSpec


def test_both_fields_are_optional() -> None:
    spec = SchedulingSpec()
    assert (spec.queue_name, spec.priority_class_name) == (None, None)
    spec = SchedulingSpec.model_validate(
        {"queueName": "team-a.gpu_1", "priorityClassName": "research.high"}
    )
    assert (spec.queue_name, spec.priority_class_name) == ("team-a.gpu_1", "research.high")


@pytest.mark.parametrize(
    "body",
    [
        {"queueName": ""},
        {"queueName": "-team"},
        {"queueName": "q" * 64},
        {"priorityClassName": "High"},
        {"priorityClassName": "a_b"},
        {"queue": "typo"},
    ],
)
def test_what_a_label_or_a_pod_field_cannot_hold_is_refused(body: dict[str, str]) -> None:
    with pytest.raises(ValidationError):
        SchedulingSpec.model_validate(body)
