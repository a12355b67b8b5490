"""Conditions keep their transition time while their status stays; timestamps are written as
Kubernetes writes them and read back."""

from __future__ import annotations

from datetime import timedelta

from dressage_operator.conditions import parse_timestamp, timestamp
from dressage_operator.decide import decide
from dressage_operator.plan import Observed

from .support import CONFIG, NOW, OWNER, decide_for, make_job, running_pods


def test_condition_transition_time_is_kept_when_unchanged() -> None:
    first = decide_for(make_job(), pods=running_pods())
    later = decide(
        make_job(),
        OWNER,
        CONFIG,
        Observed(
            generation=1, status=first.status, now=NOW + timedelta(minutes=5), pods=running_pods()
        ),
    )
    assert later.status.conditions == first.status.conditions


def test_a_timestamp_is_rfc3339_in_utc_to_the_second_and_reads_back() -> None:
    text = timestamp(NOW + timedelta(microseconds=900))
    assert text == "2026-01-01T12:00:00Z"
    assert parse_timestamp(text) == NOW
    assert parse_timestamp(None) is None
    assert parse_timestamp("") is None
