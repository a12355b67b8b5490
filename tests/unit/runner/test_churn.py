"""The churn schedule of `dressage run --churn`: parsed, played through and refused where it
cannot work, before anything starts (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dressage.runner.churn import ChurnAction, ChurnEvent, due, plan_churn


def test_events_are_ordered_by_step_and_act_on_the_engines_they_name_or_the_oldest() -> None:
    events = plan_churn("drain@8:engine-2, kill@4,add@5", replicas=2)
    assert events == (
        ChurnEvent(4, ChurnAction.KILL, "engine-0"),
        ChurnEvent(5, ChurnAction.ADD, "engine-2"),
        ChurnEvent(8, ChurnAction.DRAIN, "engine-2"),
    )
    assert [str(e) for e in events] == ["kill@4:engine-0", "add@5:engine-2", "drain@8:engine-2"]
    assert due(events, 5) == [events[1]]
    assert due(events, 6) == []


def test_events_of_one_step_keep_the_order_they_were_written_in() -> None:
    # Written the other way round, the drain would leave the run without an engine.
    assert [str(e) for e in plan_churn("add@2,drain@2", replicas=1)] == [
        "add@2:engine-1",
        "drain@2:engine-0",
    ]
    with pytest.raises(ValueError, match="without an engine"):
        plan_churn("drain@2,add@2", replicas=1)


@pytest.mark.parametrize(
    ("schedule", "replicas", "message"),
    [
        ("reboot@3", 2, "'reboot@3': unknown action"),
        ("kill@0", 2, "'kill@0': the step must be 1 or later"),
        ("kill@x", 2, "'kill@x': expected ACTION@STEP"),
        ("add@3:engine-9", 2, "'add@3:engine-9': add names no engine"),
        ("kill@2:engine-5", 2, "'kill@2:engine-5': engine-5 is not running at step 2"),
        ("kill@2,drain@3:engine-0", 2, "'drain@3:engine-0': engine-0 is not running at step 3"),
        ("kill@2", 1, "'kill@2': it would leave the run without an engine"),
        ("kill@40", 2, "'kill@40': the run ends at step 30"),
    ],
)
def test_a_schedule_that_cannot_work_is_refused_naming_the_event(
    schedule: str, replicas: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        plan_churn(schedule, replicas=replicas, steps=30)


def test_an_empty_schedule_is_no_churn() -> None:
    assert plan_churn("", replicas=1) == ()


@given(
    st.integers(min_value=1, max_value=4),
    st.lists(
        st.tuples(st.sampled_from(list(ChurnAction)), st.integers(min_value=1, max_value=20)),
        max_size=12,
    ),
)
def test_a_planned_schedule_never_leaves_the_run_without_an_engine(
    replicas: int, items: list[tuple[ChurnAction, int]]
) -> None:
    text = ",".join(f"{action.value}@{step}" for action, step in items)
    try:
        events = plan_churn(text, replicas=replicas)
    except ValueError:
        return
    running = {f"engine-{i}" for i in range(replicas)}
    names = set(running)
    for event in events:
        if event.action is ChurnAction.ADD:
            assert event.engine not in names  # never reused
            names.add(event.engine)
            running.add(event.engine)
        else:
            assert event.engine in running
            running.remove(event.engine)
        assert running
    assert [e.step for e in events] == sorted(e.step for e in events)
