"""The routing figures of a step reach the run's Prometheus registry."""

from __future__ import annotations

from prometheus_client import generate_latest

from dressage import metrics as names
from dressage.api.figures import StepFigures
from dressage.orchestrator.loop import StepRecord
from dressage.orchestrator.metrics import RunMetrics
from dressage.trainer.grpo import ROUTED_TOKEN_FRACTION, ROUTING_AGREEMENT


def test_routing_agreement_and_routed_token_fraction_are_exported() -> None:
    run = RunMetrics("j")
    measured = {ROUTING_AGREEMENT: 0.875, ROUTED_TOKEN_FRACTION: 0.5, "reward": 0.25}
    figures = StepFigures().with_trainer_figures(measured)
    run.observe(StepRecord(step=1, version="v1", figures=figures), version_ordinal=1)
    lines = generate_latest(run.registry).decode().splitlines()
    assert f"{names.ROUTING_AGREEMENT} 0.875" in lines
    assert f"{names.ROUTED_TOKEN_FRACTION} 0.5" in lines
