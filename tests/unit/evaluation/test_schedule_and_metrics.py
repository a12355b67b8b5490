"""When versions are evaluated, the publish hold, and the evaluations' bounded `/metrics`."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import generate_latest

from dressage import metrics as names
from dressage.data.groups import is_evaluation_group
from dressage.evaluation.evaluator import EvaluationError, evaluation_tag
from dressage.evaluation.figures import Evaluation, exported
from dressage.evaluation.schedule import Evaluations, EvaluationSchedule
from dressage.orchestrator.metrics import RunMetrics
from dressage.proxy.span_rule import PartialRolloutSpanLimit, SingleVersion, rule_for_session


def _evaluation(version: str, step: int, p1: float) -> Evaluation:
    return Evaluation(version, step, 16, 1, p1, {1: p1}, 0.5)


@given(every=st.integers(1, 20), final=st.integers(1, 200))
def test_the_start_every_nth_step_and_the_final_step_are_due(every: int, final: int) -> None:
    schedule = EvaluationSchedule(every, final)
    due = [step for step in range(final + 1) if schedule.due(step)]
    assert due[0] == 0
    assert due[-1] == final
    assert set(range(0, final + 1, every)) <= set(due)
    assert len(due) <= final // every + 2


class GatedEvaluator:
    """An evaluator whose evaluations end when the test says so."""

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}

    async def evaluate(self, version: str, step: int) -> Evaluation:
        gate = self.gates.setdefault(version, asyncio.Event())
        await gate.wait()
        if version == "bad":
            raise EvaluationError("engine gone")
        return _evaluation(version, step, 0.5)


async def test_a_publish_waits_for_the_evaluations_in_flight() -> None:
    evaluator = GatedEvaluator()
    results: list[str] = []
    logged: list[str] = []
    runs = Evaluations(
        evaluator,  # type: ignore[arg-type]
        EvaluationSchedule(2, 4),
        on_result=lambda e: results.append(e.version),
        log=logged.append,
    )
    runs.start("v0", 0)
    runs.published("v1", 1)  # not due
    hold = asyncio.create_task(runs.before_publish())
    await asyncio.sleep(0)  # let the evaluation and the hold start
    assert not hold.done()
    evaluator.gates["v0"].set()
    await hold
    assert results == ["v0"]
    runs.published("v2", 2)
    runs.start("v2", 2)  # once per version
    runs.published("bad", 4)
    for gate in ("v2", "bad"):
        evaluator.gates.setdefault(gate, asyncio.Event()).set()
    await runs.finish("v2", 4)
    assert results == ["v0", "v2"]
    assert logged == ["eval bad  not counted: engine gone"]
    best = runs.best
    assert best is not None
    assert best.version == "v2"  # of equal figures, the later step


def test_only_the_latest_versions_and_the_best_stay_exported() -> None:
    run = RunMetrics("j")
    for i, p1 in enumerate([0.1, 0.9, 0.2, 0.3, 0.4, 0.5, 0.6]):
        run.observe_evaluation(_evaluation(f"v{i * 10}", i * 10, p1))
    text = generate_latest(run.registry).decode()
    lines = text.splitlines()
    shown = {v for v in (f"v{i * 10}" for i in range(7)) if f'version="{v}"' in text}
    assert shown == {"v10", "v30", "v40", "v50", "v60"}  # the best, then the latest 4
    assert 'dressage_eval_pass_at_k{k="1",version="v10"} 0.9' in lines
    assert 'dressage_eval_reward_mean{version="v60"} 0.6' in lines
    assert 'dressage_eval_step{version="v60"} 60.0' in lines
    assert 'dressage_eval_prompts{version="v60"} 16.0' in lines
    assert f"{names.EVAL_RUNS} 7.0" in lines


@given(st.lists(st.floats(0, 1), min_size=1, max_size=30), st.integers(1, 6))
def test_exported_series_are_bounded_and_keep_the_best(values: list[float], latest: int) -> None:
    runs = [_evaluation(f"v{i}", i, p) for i, p in enumerate(values)]
    kept = exported(runs, latest)
    assert len(kept) <= latest + 1
    assert max(e.pass_at_1 for e in kept) == max(values)
    assert runs[-1] in kept


@pytest.mark.parametrize("rule", [PartialRolloutSpanLimit(None), SingleVersion()])
def test_evaluation_groups_keep_one_version_whatever_the_proxys_rule(rule: object) -> None:
    tag = evaluation_tag("job", "v3")
    assert is_evaluation_group(f"{tag}-p0-a0")
    assert isinstance(rule_for_session(rule, f"{tag}-p0-a0"), SingleVersion)  # type: ignore[arg-type]
    assert rule_for_session(rule, "job-p0-a0") is rule  # type: ignore[arg-type]
    assert not is_evaluation_group(None)
