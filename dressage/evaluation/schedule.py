"""When versions are evaluated during training, and the hold that keeps each evaluation to one.

The starting version, every version whose step is a multiple of `everySteps`, and the final
version are evaluated, each in a task of its own beside training (`Evaluations`). The trainer
keeps training while an evaluation runs; only its next publish waits for the evaluations in
flight (`before_publish`): the engines keep serving the evaluated version until its evaluation
is done, so its figures are that version's. The wait is the cost of evaluation to training,
bounded by `maxConcurrency` (how many of its prompt groups share the engines at once).

A failed or superseded evaluation is logged and leaves training alone.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from dressage.evaluation.evaluator import EvaluationError, Evaluator
from dressage.evaluation.figures import Evaluation, best


@dataclass(frozen=True)
class EvaluationSchedule:
    """Which steps' versions are evaluated (pure)."""

    every_steps: int
    final_step: int

    def due(self, step: int) -> bool:
        """Whether the version published by `step` is evaluated (0: the starting weights)."""
        return step == 0 or step == self.final_step or step % self.every_steps == 0


class Evaluations:
    """The run's evaluations: started as versions are published, held before the next."""

    def __init__(
        self,
        evaluator: Evaluator,
        schedule: EvaluationSchedule,
        *,
        on_result: Callable[[Evaluation], None] = lambda evaluation: None,
        log: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.evaluator = evaluator
        self.schedule = schedule
        self.on_result = on_result
        self.log = log
        self.results: list[Evaluation] = []
        self._started: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def best(self) -> Evaluation | None:
        return best(self.results)

    def start(self, version: str, step: int) -> None:
        """Evaluate `version` (once per version) in a task of its own."""
        if version in self._started:
            return
        self._started.add(version)
        task = asyncio.create_task(self._run(version, step), name=f"evaluate {version}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, version: str, step: int) -> None:
        try:
            evaluation = await self.evaluator.evaluate(version, step)
        except EvaluationError as exc:
            self.log(f"eval {version}  not counted: {exc}")
            return
        except Exception as exc:  # an agent's or the proxy's error: training goes on
            self.log(f"eval {version}  failed: {type(exc).__name__}: {exc}")
            return
        self.results.append(evaluation)
        self.on_result(evaluation)

    async def before_publish(self) -> None:
        """Wait for the evaluations in flight (the engines serve their version until then)."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks))

    def published(self, version: str, step: int) -> None:
        """`version`, made by `step`, now serves: evaluate it when the schedule says so."""
        if self.schedule.due(step):
            self.start(version, step)

    async def finish(self, version: str, step: int) -> None:
        """Evaluate the final version (unless it was) and wait for every evaluation."""
        self.start(version, step)
        await self.before_publish()

    async def aclose(self) -> None:
        """Cancel the evaluations still in flight (a run that stops early)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*tasks, return_exceptions=True)
