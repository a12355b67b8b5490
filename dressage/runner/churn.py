"""A churn schedule for a local run: engines killed, added and drained at given steps (pure).

`dressage run JOB.yaml --churn kill@3,add@4,drain@7:engine-1` changes the run's engine fleet
while it trains, the way a cluster's does: a node lost (`kill`, SIGKILL: no drain), a scale-up
or a replacement (`add`), a scale-down, a spot notice or a preemption (`drain`: the proxy's
drain, then SIGTERM). `ACTION@STEP[:ENGINE]` acts once step STEP's record is written;
`kill` and `drain` name their engine, or take the oldest one running. Engines are named
`engine-<n>` in the order they start, never reused: a run of `inference.replicas: 2` starts
`engine-0` and `engine-1`, and its first `add` starts `engine-2`.

`plan_churn` checks a schedule before anything starts, by playing it through: every engine
named must be running at that point, and no event may leave the run without an engine (a run
with none takes no step, so the schedule would never go on). The fleet acts on the plan's
`ChurnEvent.engine`, so what the schedule names and what is done agree by construction.
`dressage.runner.fleet` carries the events out.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

ENGINE_PREFIX = "engine-"


class ChurnAction(enum.StrEnum):
    ADD = "add"
    """Start a new engine; the proxy routes to it once it serves the current weights."""
    KILL = "kill"
    """SIGKILL an engine: a crash, its turns in flight fail over or are retried."""
    DRAIN = "drain"
    """Drain an engine through the proxy, then stop it: its turns continue elsewhere."""


@dataclass(frozen=True)
class ChurnEvent:
    """One change of the fleet, after step `step`'s record."""

    step: int
    action: ChurnAction
    engine: str
    """The engine it acts on: the one `add` starts, the one `kill` or `drain` stops."""

    def __str__(self) -> str:
        return f"{self.action.value}@{self.step}:{self.engine}"


_EVENT = re.compile(r"^(?P<action>[a-z]+)@(?P<step>\d+)(?::(?P<engine>[\w.-]+))?$")


def engine_name(index: int) -> str:
    """The name of the run's `index`-th engine (0-based, in start order)."""
    return f"{ENGINE_PREFIX}{index}"


def plan_churn(text: str, *, replicas: int, steps: int | None = None) -> tuple[ChurnEvent, ...]:
    """The events of the schedule `text` (comma-separated `ACTION@STEP[:ENGINE]`) for a run
    starting `replicas` engines, in the order they happen (by step, then as written), each
    with the engine it acts on. `ValueError` naming the event at fault: an unknown action, a
    step below 1 (or beyond `steps`), an `add` naming an engine, an engine not running then,
    or an event that would leave no engine."""
    if replicas < 1:
        raise ValueError(f"replicas: a run starts at least one engine, got {replicas}")
    parsed: list[tuple[int, int, ChurnAction, str | None, str]] = []
    for order, item in enumerate(part.strip() for part in text.split(",")):
        if not item:
            continue
        match = _EVENT.match(item)
        if match is None:
            raise ValueError(f"churn event {item!r}: expected ACTION@STEP or ACTION@STEP:ENGINE")
        try:
            action = ChurnAction(match["action"])
        except ValueError:
            known = ", ".join(a.value for a in ChurnAction)
            raise ValueError(f"churn event {item!r}: unknown action (one of {known})") from None
        step = int(match["step"])
        if step < 1:
            raise ValueError(f"churn event {item!r}: the step must be 1 or later")
        if steps is not None and step > steps:
            raise ValueError(f"churn event {item!r}: the run ends at step {steps}")
        if action is ChurnAction.ADD and match["engine"] is not None:
            raise ValueError(
                f"churn event {item!r}: add names no engine (new engines are named in order)"
            )
        parsed.append((step, order, action, match["engine"], item))
    running = [engine_name(i) for i in range(replicas)]
    started = replicas
    events: list[ChurnEvent] = []
    for step, _, action, named, item in sorted(parsed, key=lambda p: (p[0], p[1])):
        if action is ChurnAction.ADD:
            engine = engine_name(started)
            started += 1
            running.append(engine)
        else:
            engine = named or running[0]
            if engine not in running:
                raise ValueError(
                    f"churn event {item!r}: {engine} is not running at step {step} "
                    f"(running: {', '.join(running)})"
                )
            if len(running) == 1:
                raise ValueError(
                    f"churn event {item!r}: it would leave the run without an engine; add one "
                    "before it"
                )
            running.remove(engine)
        events.append(ChurnEvent(step, action, engine))
    return tuple(events)


def due(events: tuple[ChurnEvent, ...], step: int) -> list[ChurnEvent]:
    """The events to carry out once step `step`'s record is written."""
    return [e for e in events if e.step == step]
