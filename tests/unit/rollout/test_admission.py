"""Admission control: the pure rule, and the async collector's worker waiting on it.

The collector is driven by an in-process rollout whose groups finish only when the test says
so, stamped with a version the test chooses, while the test plays the training loop: take a
batch, let some groups finish while "training", publish the next version. `settle()` runs the
event loop until nothing more can happen without the test (every runnable task has run), so
each decision of the test sees the worker parked.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dressage.data.groups import Group, GroupFailed, TrainBatch
from dressage.data.samples import Sample
from dressage.rollout.admission import AdmissionPolicy
from dressage.rollout.collector import AsyncRolloutCollector
from dressage.rollout.lag import batch_lag, trainer_version_order
from dressage.rollout.retry import RetryPolicy
from dressage.rollout.staleness import DropReason, StalenessConfig

STALENESS_DROPS = (DropReason.STALE_VERSION.value, DropReason.WINDOW_ADVANCED.value)

# --- the rule --------------------------------------------------------------------------


def test_rule_is_arealstyle_bound_on_groups_not_dropped() -> None:
    policy = AdmissionPolicy(keep_versions=2, batch_size=4)
    # Before any batch or publish: two batches' worth may be ahead.
    assert policy.capacity(published=0, taken=0, ahead=0) == 8
    assert policy.admits(published=0, taken=0, ahead=7)
    assert not policy.admits(published=0, taken=0, ahead=8)
    # One batch taken, its version not published yet ("training"): one batch's worth.
    assert policy.capacity(published=0, taken=1, ahead=3) == 1
    assert not policy.admits(published=0, taken=1, ahead=4)
    # The publish widens it again.
    assert policy.admits(published=1, taken=1, ahead=4)


def test_rule_keeps_a_waiting_trainer_fed_when_publishes_are_missing() -> None:
    policy = AdmissionPolicy(keep_versions=1, batch_size=3)
    assert not policy.admits(published=0, taken=2, ahead=0)
    assert policy.admits(published=0, taken=2, ahead=2, sink_waiting=True)
    assert not policy.admits(published=0, taken=2, ahead=3, sink_waiting=True)


def test_rule_is_off_without_a_window_or_when_disabled() -> None:
    assert (
        AdmissionPolicy(keep_versions=0, batch_size=2).capacity(published=0, taken=9, ahead=99)
        is None
    )
    off = AdmissionPolicy(keep_versions=2, batch_size=2, enabled=False)
    assert off.admits(published=0, taken=9, ahead=99)


def test_projected_lag_is_the_batch_a_group_lands_in_minus_the_live_version() -> None:
    policy = AdmissionPolicy(keep_versions=2, batch_size=4)
    # Nothing taken or published: the first 4 groups train at v0 (lag 0), the next 4 at v1.
    assert [policy.projected_lag(published=0, taken=0, ahead=a) for a in (0, 3, 4, 7)] == [
        0,
        0,
        1,
        1,
    ]
    # One batch taken and training, v1 not yet live: a group started now trains at v1 at best.
    assert policy.projected_lag(published=0, taken=1, ahead=0) == 1
    assert policy.projected_lag(published=1, taken=1, ahead=0) == 0
    # More publishes than batches (a caller breaking the contract): never below 0.
    assert policy.projected_lag(published=3, taken=1, ahead=0) == 0


@given(
    keep=st.integers(1, 4),
    batch=st.integers(1, 5),
    taken=st.integers(0, 6),
    behind=st.integers(0, 3),
    ahead=st.integers(0, 40),
)
def test_admission_admits_exactly_the_groups_projected_inside_the_window(
    keep: int, batch: int, taken: int, behind: int, ahead: int
) -> None:
    """The rule and the projection agree: a group may start exactly when the lag it is
    projected to have is below keep_versions."""
    policy = AdmissionPolicy(keep_versions=keep, batch_size=batch)
    counts = {"published": max(0, taken - behind), "taken": taken, "ahead": ahead}
    capacity = policy.capacity(**counts)
    assert capacity is not None
    assert (capacity > 0) == (policy.projected_lag(**counts) < keep)


def test_rule_rejects_bad_counts_naming_them() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        AdmissionPolicy(keep_versions=1, batch_size=0)
    with pytest.raises(ValueError, match="keep_versions"):
        AdmissionPolicy(keep_versions=-1, batch_size=1)
    with pytest.raises(ValueError, match="ahead"):
        AdmissionPolicy(keep_versions=1, batch_size=1).admits(published=0, taken=0, ahead=-1)


# --- an in-process rollout the test finishes group by group ----------------------------


def group_for(index: int, version: str) -> Group:
    samples = [
        Sample.build(
            prompt_tokens=[1],
            response_tokens=[2],
            response_versions=[version],
            rollout_log_probs=[-0.1],
            reward=float(j),
            group_id=f"p{index}",
            parent_traj_id=f"p{index}-{j}",
        )
        for j in range(2)
    ]
    return Group(group_id=f"p{index}", samples=tuple(samples))


@dataclass
class Engines:
    """Started attempts wait until `finish` or `fail`; `live` is the published version index."""

    live: int = 0
    observed: set[int] = field(default_factory=set)
    """Versions handed out so far; `stamp` keeps their first appearances in publish order."""
    waiting: dict[int, asyncio.Future[int | None]] = field(default_factory=dict)
    start_version: dict[int, int] = field(default_factory=dict)
    started: list[int] = field(default_factory=list)

    async def rollout(self, index: int, attempt: int) -> Group:
        future: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self.waiting[index] = future
        self.start_version.setdefault(index, self.live)
        if attempt == 0:
            self.started.append(index)
        version = await future
        if version is None:
            raise GroupFailed("engine_error")
        return group_for(index, f"v{version}")

    def finish(self, index: int, version: int) -> None:
        self.observed.add(version)
        self.waiting.pop(index).set_result(version)

    def stamp(self, version: int) -> int:
        """`version`, or the newest handed out when `version` would appear after newer ones
        without having appeared before (versions are first seen in the order published)."""
        if version in self.observed or not self.observed or version > max(self.observed):
            return version
        return max(self.observed)

    def fail(self, index: int) -> None:
        self.waiting.pop(index).set_result(None)


async def settle() -> None:
    """Run the event loop until every task is parked on something only the test can do."""
    loop = asyncio.get_running_loop()
    quiet = 0
    while quiet < 3:
        before = len(loop._ready)  # type: ignore[attr-defined]
        await asyncio.sleep(0)
        quiet = quiet + 1 if before == 0 and not loop._ready else 0  # type: ignore[attr-defined]


def no_backoff(retries: int) -> RetryPolicy:
    return RetryPolicy(max_retries=retries, backoff_s=0.0, breaker_after=10**6)


def make(
    engines: Engines, *, batch: int, concurrency: int, keep: int, retries: int = 1, **kw: object
) -> AsyncRolloutCollector:
    return AsyncRolloutCollector(
        engines.rollout,
        batch_size=batch,
        concurrency=concurrency,
        retry=no_backoff(retries),
        staleness=StalenessConfig(keep),
        **kw,  # type: ignore[arg-type]
    )


# --- the worker -------------------------------------------------------------------------


async def test_worker_waits_for_a_publish_and_for_drops_not_a_timer() -> None:
    now = [100.0]
    engines = Engines()
    c = make(engines, batch=2, concurrency=10, keep=2, retries=0, clock=lambda: now[0])
    async with c:
        await settle()
        assert engines.started == [0, 1, 2, 3]  # keep_versions * batch_size ahead
        assert c.stats.totals.admissions_held == 1
        engines.finish(0, 0)
        engines.finish(1, 0)
        batch = await c.next_batch()
        await settle()
        assert [g.group_id for g in batch.groups] == ["p0", "p1"]
        assert len(engines.started) == 4  # "training": one batch's worth ahead is the limit
        now[0] += 2.5
        engines.live = 1
        c.on_weights_published("v1")
        await settle()
        assert engines.started == [0, 1, 2, 3, 4, 5]
        assert c.stats.totals.admission_wait_seconds == pytest.approx(2.5)
        engines.fail(2)  # dropped after its last attempt: capacity for one more
        await settle()
        assert engines.started[-1] == 6
        assert c.stats.totals.admissions_held == 3


async def test_batches_report_the_lag_projected_for_the_groups_started_since() -> None:
    engines = Engines()
    c = make(engines, batch=2, concurrency=10, keep=2, retries=0)
    async with c:
        await settle()
        engines.finish(0, 0)
        engines.finish(1, 0)
        first = await c.next_batch()
        # Groups 0-3 started with 0-3 ahead of them: batches 0, 0, 1, 1 from v0.
        assert (first.figures.admission_lag_mean, first.figures.admission_lag_max) == (0.5, 1.0)
        engines.live = 1
        c.on_weights_published("v1")
        await settle()
        engines.finish(2, 0)
        engines.finish(3, 1)
        second = await c.next_batch()
        # Groups 4 and 5 started with v1 live, one batch taken and 2 or 3 ahead: batch 2.
        assert (second.figures.admission_lag_mean, second.figures.admission_lag_max) == (1, 1)
        await settle()
        third = asyncio.create_task(c.next_batch())
        await settle()
        # No group started since: nothing projected.
        engines.finish(4, 1)
        engines.finish(5, 1)
        assert (await third).figures.admission_lag_max is None


async def test_admission_off_by_default_without_a_window() -> None:
    engines = Engines()
    async with make(engines, batch=2, concurrency=10, keep=0):
        await settle()
        assert len(engines.started) == 10


async def test_batches_keep_coming_without_publishes_and_batch_above_concurrency(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A caller that never publishes breaks the rule's contract; the trainer is still fed,
    with a warning naming the broken contract."""
    engines = Engines()
    c = make(engines, batch=5, concurrency=2, keep=1, retries=2)
    async with c:
        for _ in range(4):
            task = asyncio.create_task(c.next_batch())
            tries = 0
            while not task.done():
                await settle()
                assert engines.waiting or task.done(), "the worker stalled"
                if engines.waiting:
                    index = min(engines.waiting)
                    tries += 1
                    if tries % 3 == 0:
                        engines.fail(index)
                    else:
                        engines.finish(index, 0)
            assert len((await task).groups) == 5
    assert "expected one publish per step" in caplog.text


# --- the guarantee ----------------------------------------------------------------------


Pick = Callable[[list[int]], int]


async def run_schedule(
    *,
    batch: int,
    concurrency: int,
    keep: int,
    steps: int,
    pick: Pick,
    version_of: Callable[[Engines, int], int],
    fails: Callable[[], bool],
    training_finishes: Callable[[], int],
    admission: bool,
    batches: list[TrainBatch] | None = None,
) -> AsyncRolloutCollector:
    """Play `steps` trainer steps; `pick` chooses which waiting group finishes next; each
    batch is appended to `batches`."""
    engines = Engines()
    c = make(engines, batch=batch, concurrency=concurrency, keep=keep, admission=admission)

    def finish_one() -> None:
        index = pick(sorted(engines.waiting))
        if fails():
            engines.fail(index)
        else:
            engines.finish(index, version_of(engines, index))

    def check_bound() -> None:
        if admission:
            live = c.stats.groups_started - sum(c.stats.totals.dropped_groups.values())
            assert live <= (engines.live + keep) * batch

    async with c:
        for _ in range(steps):
            task = asyncio.create_task(c.next_batch())
            while True:
                await settle()
                check_bound()
                if task.done():
                    break
                assert engines.waiting, "deadlock: the trainer waits and nothing is in flight"
                finish_one()
            assert len(task.result().groups) == batch
            if batches is not None:
                batches.append(task.result())
            for _ in range(training_finishes()):
                await settle()
                check_bound()
                if not engines.waiting:
                    break
                finish_one()
            engines.live += 1
            c.on_weights_published(f"v{engines.live}")
    return c


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example],
)
@given(
    data=st.data(),
    batch=st.integers(1, 5),
    concurrency=st.integers(1, 8),
    keep=st.integers(1, 3),
    in_start_order=st.booleans(),
)
def test_no_admitted_group_is_dropped_for_staleness(
    data: st.DataObject, batch: int, concurrency: int, keep: int, in_start_order: bool
) -> None:
    """The stated guarantee, over random completion orders, failures and publish times.

    In start order: a group's version is anything from the version live when it started to
    the live one (each version first seen in publish order). In any order: a group carries
    the version live when it completes. Either way no group is dropped as `stale_version` or
    `window_advanced`, every step gets its batch, and no trained sample is `keep_versions` or
    more versions behind the trainer, nor projected to be at its start.
    """

    # Every choice comes from one Hypothesis-driven `Random`: it shrinks and reports its calls
    # like separate `data.draw`s, at a small fraction of their cost (hundreds per schedule).
    rng = data.draw(st.randoms(use_true_random=False))

    def pick(waiting: list[int]) -> int:
        if in_start_order:
            return waiting[0]
        return rng.choice(waiting)

    def version_of(engines: Engines, index: int) -> int:
        if not in_start_order:
            return engines.live
        low = engines.start_version[index]
        return engines.stamp(rng.randint(low, engines.live))

    batches: list[TrainBatch] = []
    c = asyncio.run(
        run_schedule(
            batch=batch,
            concurrency=concurrency,
            keep=keep,
            steps=6,
            pick=pick,
            version_of=version_of,
            fails=lambda: rng.randint(0, 4) == 0,
            training_finishes=lambda: rng.randint(0, 2 * batch),
            admission=True,
            batches=batches,
        )
    )
    assert not any(c.stats.totals.dropped_groups[r] for r in STALENESS_DROPS), (
        c.stats.totals.dropped_groups
    )
    assert c.stats.groups_trained == 6 * batch
    for step, trained in enumerate(batches):  # step `step` trains from version `step`
        lag = batch_lag(trained.samples, trainer_version_order(step), f"v{step}")
        assert lag.unknown_samples == 0
        assert lag.max is not None
        assert lag.max < keep, (step, lag.lags)
        projected = trained.figures.admission_lag_max
        assert projected is None or projected < keep


@pytest.mark.parametrize("admission", [False, True])
async def test_main_job_like_schedule_wastes_no_rollout_with_admission(
    admission: bool,
) -> None:
    """Rollout outpaces a slow trainer (8 groups finish per training step against batches of
    4, 32 in flight, keep_versions 2). Groups finish in the order started, a third of them
    with the version live when they started (a multi-turn agent whose last turn began before
    the publishes since), the rest with the live one. Without admission the backlog goes
    stale and many groups are dropped, on arrival and from the candidate batch; with it none
    is, and the same steps are trained."""
    rng = random.Random(7)

    def version_of(engines: Engines, index: int) -> int:
        if rng.random() < 1 / 3:
            return engines.stamp(engines.start_version[index])
        return engines.live

    c = await run_schedule(
        batch=4,
        concurrency=32,
        keep=2,
        steps=30,
        pick=min,
        version_of=version_of,
        fails=lambda: rng.random() < 0.05,
        training_finishes=lambda: 8,
        admission=admission,
    )
    staleness_drops = sum(c.stats.totals.dropped_groups[r] for r in STALENESS_DROPS)
    assert c.stats.groups_trained == 30 * 4
    if admission:
        assert staleness_drops == 0
        assert c.stats.totals.admissions_held > 0
    else:
        assert c.stats.totals.dropped_groups[DropReason.STALE_VERSION.value] > 0
        assert staleness_drops > 30
