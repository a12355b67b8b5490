"""Rewards as code: the function a `dataset` task scores completions with.

`spec.task.reward` names a built-in (`exact_match`, `math`) or a user function
`package.module:function`. A function is called `f(completion, row)` for one sample, or
`f(completions, rows)` with lists when `spec.task.rewardBatched` is set; `row` is a dict of the
dataset row's reward columns. It may be a coroutine function. It returns a number, or a dict of
named numbers that becomes the trained scalar as the weighted sum with `spec.task.rewardWeights`
(every part weight 1 when unset).

Every call runs under `spec.task.rewardTimeoutSeconds`: synchronous functions in a daemon
thread of their own (a call that overruns is abandoned and its thread left to finish; it never
delays other calls or the process's exit), coroutine functions awaited on the caller's loop
(from a synchronous caller, on a loop of their own in that thread). A call that raises,
overruns or returns something that is not a finite number fails with a reason:
`reward_raised`, `reward_timeout` or `reward_invalid`, and becomes a `UserCodeFault`
(`dressage.tasks.faults`): the exception's type and message and the line of the user's code
that raised it. The fault is logged the first time it occurs (later occurrences of the same
error are counted) and kept for the run's report. With `spec.task.onRewardError: zero` (the
default) the sample gets reward 0 and the failure is counted in `RewardStats`; with `stop` the
call raises `RewardError`, which stops the run at once, and every later call raises it again.
With `drop`, a failure that is the infrastructure's (`dressage.tasks.infrastructure`: a
timeout, an unreachable service, a crashed sandbox) makes `ascored` raise `UserCodeFailed`
with the drop reason `reward_error`, so the sample's whole group is dropped, unretried, rather
than trained with a 0 that says nothing about the answer; any other failure gets reward 0, as
under `zero`. Outside rollout (`score`, an evaluation) such a failure scores 0 too.

`dry_run` calls the function once outside all that (nothing counted), so a job can check its
reward on a dataset row before anything starts.

`ascored` gives each sample's reward as a `Scored` (`dressage.tasks.base`): its value, its
named parts and its failure reason. They travel with the sample (`dressage.agents.groups`), so
a step reports the parts and the reward failures of the batch it trained
(`dressage.rollout.stats`), not of every call made meanwhile. `RewardStats` counts every call
since the task was built (calls, failures by reason, part means), for checks and tests.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import math
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dressage.api.job import TaskSpec
from dressage.api.loader import ConfigurationError
from dressage.tasks.base import Scored
from dressage.tasks.faults import (
    REWARD_FIELD,
    UserCodeFailed,
    UserCodeFault,
    UserCodeFaults,
    fault_from_exception,
)
from dressage.tasks.infrastructure import DROP_SETTING, REWARD_ERROR, is_infrastructure
from dressage.tasks.usercode import UserCodeError, import_object

log = logging.getLogger(__name__)

REWARD_RAISED = "reward_raised"
REWARD_TIMEOUT = "reward_timeout"
REWARD_INVALID = "reward_invalid"
STOP_SETTING = "spec.task.onRewardError is stop"

Row = Mapping[str, Any]


class RewardError(UserCodeFailed):
    """A reward call failed under `onRewardError: stop`; `reason` is its failure reason and
    `fault` what the reward did wrong."""


@dataclass
class RewardStats:
    """Reward calls, failures by reason and named-part means (thread-safe)."""

    samples: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    part_sums: dict[str, float] = field(default_factory=dict)
    part_counts: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, parts: Mapping[str, float] | None, failure: str | None) -> None:
        with self._lock:
            self.samples += 1
            if failure is not None:
                self.failures[failure] += 1
            for name, value in (parts or {}).items():
                self.part_sums[name] = self.part_sums.get(name, 0.0) + value
                self.part_counts[name] += 1

    def snapshot(self) -> dict[str, Any]:
        """`{"samples", "failures": {reason: n}, "parts": {name: mean}}` so far."""
        with self._lock:
            return {
                "samples": self.samples,
                "failures": dict(self.failures),
                "parts": {n: self.part_sums[n] / self.part_counts[n] for n in self.part_sums},
            }


class _Failure(Exception):
    def __init__(self, fault: UserCodeFault, *, infrastructure: bool = False) -> None:
        super().__init__(str(fault))
        self.fault = fault
        self.infrastructure = infrastructure
        """Whether the failure is the infrastructure's (`dressage.tasks.infrastructure`)."""


_Outcome = tuple[float, dict[str, float] | None] | _Failure
"""One sample's reward and named parts, or why it has none."""


@dataclass(frozen=True)
class exact_match:
    """1 when the completion, stripped and with runs of whitespace collapsed, equals the row's
    answer the same way; else 0. (A class rather than a closure, so a task holding it can be
    handed to the rollout process.)"""

    answer_column: str

    def __call__(self, completion: str, row: Row) -> float:
        return 1.0 if _norm(completion) == _norm(str(row[self.answer_column])) else 0.0


@dataclass(frozen=True)
class math_answer:
    """1 when `math-verify` finds the completion's answer mathematically equal to the row's
    (numbers, fractions, LaTeX, `\\boxed{}`); else 0."""

    answer_column: str

    def __post_init__(self) -> None:
        import math_verify  # noqa: F401 - fails here, when the task is built, if missing

    def __call__(self, completion: str, row: Row) -> float:
        from math_verify import parse, verify

        for name in ("math_verify.parser", "math_verify.grader"):
            logging.getLogger(name).addFilter(_no_timeout_notice)  # once: filters are a set
        # math-verify's own timeouts use SIGALRM, which only the main thread may set; the
        # caller's timeout bounds the call instead.
        main = threading.current_thread() is threading.main_thread()
        limit = 5 if main else 0
        gold = parse(str(row[self.answer_column]), parsing_timeout=limit)
        if not gold:
            raise ValueError(f"math: cannot parse the answer {row[self.answer_column]!r}")
        predicted = parse(completion, parsing_timeout=limit)
        return 1.0 if verify(gold, predicted, timeout_seconds=limit or None) else 0.0


def _no_timeout_notice(record: logging.LogRecord) -> bool:
    """Drops math-verify's notice that its own timeout is off: the reward call's bounds it."""
    return not record.getMessage().startswith("Timeout is disabled")


BUILTIN_REWARDS: dict[str, Callable[[str], Callable[[str, Row], float]]] = {
    "exact_match": exact_match,
    "math": math_answer,
}


def _norm(text: str) -> str:
    return " ".join(text.split())


class RewardFunction:
    """A reward function with its timeout, failure policy and statistics."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str,
        batched: bool = False,
        weights: Mapping[str, float] | None = None,
        timeout_s: float = 30.0,
        on_error: str = "zero",
        faults: UserCodeFaults | None = None,
    ) -> None:
        """`faults`: where failures are recorded (default: a registry of its own); a run sets
        its registry (`faults`) before rollout starts."""
        if on_error not in ("zero", "stop", "drop"):
            raise ValueError(
                f"spec.task.onRewardError must be zero, stop or drop, got {on_error!r}"
            )
        self.fn = fn
        self.name = name
        self.batched = batched
        self.weights = dict(weights or {})
        self.timeout_s = timeout_s
        self.on_error = on_error
        self.stats = RewardStats()
        self.faults = UserCodeFaults() if faults is None else faults
        self.stopped: RewardError | None = None
        self._is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            type(fn).__call__
        )

    @classmethod
    def from_spec(cls, spec: TaskSpec, answer_column: str | None) -> RewardFunction:
        """The reward `spec.task.reward` names (default `exact_match`)."""
        reference = spec.reward or "exact_match"
        if reference in BUILTIN_REWARDS:
            if answer_column is None:
                raise ConfigurationError(
                    f"spec.task.reward: {reference} compares with the answer; "
                    "set spec.task.dataset.answerColumn"
                )
            fn: Callable[..., Any] = BUILTIN_REWARDS[reference](answer_column)
            if spec.reward_batched:
                raise ConfigurationError(f"spec.task.rewardBatched: {reference} scores one sample")
        else:
            fn = import_object(reference, "spec.task.reward")
            if not callable(fn):
                raise UserCodeError(f"spec.task.reward: {reference} is not callable")
        return cls(
            fn,
            name=reference,
            batched=spec.reward_batched,
            weights=spec.reward_weights,
            timeout_s=spec.reward_timeout_seconds,
            on_error=spec.on_reward_error,
        )

    def __getstate__(self) -> dict[str, Any]:
        """Pickled for the rollout process (`spec.rollout.separateProcess`): the function and
        its settings; statistics, the stop and the fault registry start afresh there (that
        process hands the function its own registry and reports its entries back)."""
        state = dict(self.__dict__)
        for name in ("stats", "faults", "stopped"):
            state.pop(name)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.stats = RewardStats()
        self.faults = UserCodeFaults()
        self.stopped = None

    # Scoring -------------------------------------------------------------------------------

    def score(self, completions: Sequence[str], rows: Sequence[Row]) -> list[float]:
        """Rewards of `completions` (blocking; the timeout bounds the wait)."""
        self._check_stopped()
        return [s.value for s in self._record(self._outcomes(completions, rows), droppable=False)]

    def dry_run(self, completion: str, row: Row, *, where: str = "") -> float:
        """The reward of one sample, computed as rollout would but counted nowhere (no
        statistics, no fault recorded, `onRewardError` not applied). A failure raises
        `UserCodeError` with the fault and its source line; `where` says which call it was."""
        (outcome,) = self._outcomes([completion], [row])
        if isinstance(outcome, _Failure):
            fault = outcome.fault
            code = f"\n    {fault.frame.code}" if fault.frame and fault.frame.code else ""
            raise UserCodeError(f"{fault}{', ' + where if where else ''}{code}")
        return outcome[0]

    async def ascore(self, completions: Sequence[str], rows: Sequence[Row]) -> list[float]:
        """Rewards of `completions` without blocking the event loop."""
        return [s.value for s in await self.ascored(completions, rows)]

    async def ascored(self, completions: Sequence[str], rows: Sequence[Row]) -> list[Scored]:
        """`ascore` with each sample's named parts and failure reason."""
        self._check_stopped()
        count = len(completions)
        try:
            if self._is_async:
                raw = await asyncio.wait_for(
                    self._call_async(list(completions), list(rows)), self.timeout_s
                )
            else:
                future = _in_thread(self._call_in_thread, list(completions), list(rows))
                raw = await asyncio.wait_for(asyncio.wrap_future(future), self.timeout_s)
        except TimeoutError:
            return self._record([self._timeout()] * count)
        except _Failure as exc:
            return self._record([exc] * count)
        return self._record(self._values(raw, count))

    # Internals -----------------------------------------------------------------------------

    def _outcomes(self, completions: Sequence[str], rows: Sequence[Row]) -> list[_Outcome]:
        """Each sample's reward or failure, from one call in a thread of its own."""
        count = len(completions)
        future = _in_thread(self._call_in_thread, list(completions), list(rows))
        try:
            raw = future.result(timeout=self.timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            return [self._timeout()] * count
        except _Failure as exc:
            return [exc] * count
        return self._values(raw, count)

    def _record(self, outcomes: Sequence[_Outcome], *, droppable: bool = True) -> list[Scored]:
        """Count every outcome; a failure scores 0, or stops the run under `stop`, or (when
        `droppable`, in rollout) drops the group under `drop` when it is the
        infrastructure's: every outcome is counted first, then `UserCodeFailed` is raised."""
        out: list[Scored] = []
        dropped: _Failure | None = None
        for outcome in outcomes:
            if isinstance(outcome, _Failure):
                if droppable and self.on_error == "drop" and outcome.infrastructure:
                    self._drop(outcome.fault)
                    dropped = dropped or outcome
                    continue
                out.append(Scored(self._fail(outcome.fault), failure=outcome.fault.reason))
                continue
            value, parts = outcome
            self.stats.record(parts, None)
            out.append(Scored(value, parts))
        if dropped is not None:
            raise UserCodeFailed(dropped.fault, dropped=REWARD_ERROR)
        return out

    def _invoke(self, completions: list[str], rows: list[Row]) -> Any:
        if self.batched:
            return self.fn(completions, rows)
        if len(completions) == 1:
            return self.fn(completions[0], rows[0])
        return [self.fn(c, r) for c, r in zip(completions, rows, strict=True)]

    def _call_in_thread(self, completions: list[str], rows: list[Row]) -> Any:
        try:
            result = self._invoke(completions, rows)
            if inspect.isawaitable(result) or (
                isinstance(result, list) and any(inspect.isawaitable(r) for r in result)
            ):
                result = asyncio.run(_settle(result))
        except Exception as exc:
            raise self._raised(exc) from exc
        return result

    async def _call_async(self, completions: list[str], rows: list[Row]) -> Any:
        try:
            return await _settle(self._invoke(completions, rows))
        except Exception as exc:
            raise self._raised(exc) from exc

    def _values(self, raw: Any, count: int) -> list[_Outcome]:
        """The reward and named parts of each sample in a call's result, or its failure."""
        if self.batched or count > 1:
            if not isinstance(raw, Sequence) or isinstance(raw, str | bytes) or len(raw) != count:
                got = len(raw) if isinstance(raw, Sequence) else type(raw).__name__
                return [self._invalid(f"returned {got} for a batch of {count}")] * count
            items = list(raw)
        else:
            items = [raw]
        out: list[_Outcome] = []
        for item in items:
            try:
                out.append(self._scalar(item))
            except _Failure as exc:
                out.append(exc)
        return out

    def _scalar(self, item: Any) -> tuple[float, dict[str, float] | None]:
        if isinstance(item, Mapping):
            parts: dict[str, float] = {}
            for key, value in item.items():
                parts[str(key)] = self._number(value, f"part {key!r}")
            weights = self.weights or dict.fromkeys(parts, 1.0)
            missing = sorted(set(weights) - set(parts))
            if missing:
                raise self._invalid(f"result {dict(item)!r} lacks the weighted parts {missing}")
            return sum(w * parts[n] for n, w in weights.items()), parts
        return self._number(item, "result"), None

    def _number(self, value: Any, what: str) -> float:
        if isinstance(value, bool | int | float) and math.isfinite(float(value)):
            return float(value)
        raise self._invalid(f"{what} {value!r:.200} is not a finite number")

    def _fail(self, fault: UserCodeFault) -> float:
        self.stats.record(None, fault.reason)
        if self.on_error == "stop":
            self.faults.record(fault, then="the run stops (spec.task.onRewardError: stop)")
            self.stopped = RewardError(fault, stop=STOP_SETTING)
            raise self.stopped
        self.faults.record(
            fault, then=f"the sample gets reward 0 (spec.task.onRewardError: {self.on_error})"
        )
        return 0.0

    def _drop(self, fault: UserCodeFault) -> None:
        self.stats.record(None, fault.reason)
        self.faults.record(fault, then=f"the sample's prompt group is dropped ({DROP_SETTING})")

    def _check_stopped(self) -> None:
        if self.stopped is not None:
            raise self.stopped

    def _fault(self, reason: str, message: str) -> _Failure:
        return _Failure(UserCodeFault(REWARD_FIELD, self.name, reason, message))

    def _timeout(self) -> _Failure:
        failure = self._fault(REWARD_TIMEOUT, f"no result within {self.timeout_s:g} s")
        failure.infrastructure = True
        return failure

    def _invalid(self, message: str) -> _Failure:
        return self._fault(REWARD_INVALID, message)

    def _raised(self, exc: BaseException) -> _Failure:
        fault = fault_from_exception(
            exc, field=REWARD_FIELD, reference=self.name, reason=REWARD_RAISED
        )
        return _Failure(fault, infrastructure=is_infrastructure(exc))


def _in_thread(fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
    """`fn(*args)` in a new daemon thread: a call abandoned after its timeout neither holds a
    worker other calls wait for nor keeps the process from exiting."""
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn(*args))
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=run, name="dressage-reward", daemon=True).start()
    return future


async def _settle(result: Any) -> Any:
    if isinstance(result, list):
        return [await r if inspect.isawaitable(r) else r for r in result]
    if inspect.isawaitable(result):
        return await result
    return result
