"""The trainer's evaluation series read as the operator reads them: `status.evaluation` from
the `/metrics` text the trainer serves names the same latest and best versions."""

from __future__ import annotations

from dressage_operator.eval_scrape import parse_evaluation
from prometheus_client import generate_latest

from dressage.evaluation.figures import Evaluation, best
from dressage.orchestrator.metrics import RunMetrics


def test_the_operator_reads_the_trainers_evaluations_and_agrees_on_the_best() -> None:
    run = RunMetrics("j")
    evaluations = [
        Evaluation(f"v{step}", step, 16, 4, p1 / 2, {1: p1, 2: min(1.0, p1 * 1.5)}, 1.0)
        for step, p1 in ((0, 0.1), (10, 0.5), (20, 0.3), (30, 0.5), (40, 0.2), (50, 0.4))
    ]
    for evaluation in evaluations:
        run.observe_evaluation(evaluation)
    status = parse_evaluation(generate_latest(run.registry).decode())
    assert status is not None
    assert status.latest is not None
    assert status.best is not None
    assert (status.latest.version, status.latest.step) == ("v50", 50)
    top = best(evaluations)
    assert top is not None
    assert (status.best.version, status.best.pass_at_1) == (top.version, top.pass_at_1)
    assert status.runs == 6
