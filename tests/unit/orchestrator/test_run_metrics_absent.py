"""A gauge figure a run never measures is absent from its `/metrics`, not a `0.0` that reads as
measured: a dense model's steps have no MoE routing figures, so no `dressage_routing_agreement`
or `dressage_routed_token_fraction` series; an MoE job with routing replay has both."""

from __future__ import annotations

from prometheus_client import generate_latest

from dressage import metrics as names
from dressage.api.figures import StepFigures
from dressage.orchestrator.loop import StepRecord
from dressage.orchestrator.metrics import RunMetrics


def _exported(run: RunMetrics) -> set[str]:
    """The sample names of the run's exposition."""
    lines = generate_latest(run.registry).decode().splitlines()
    return {line.split("{")[0].split(" ")[0] for line in lines if not line.startswith("#")}


def test_a_dense_models_run_exports_no_routing_figures() -> None:
    run = RunMetrics("dense")
    assert names.ROUTING_AGREEMENT not in _exported(run)  # not before the first step
    figures = StepFigures().with_trainer_figures({"trained_tokens": 10.0, "loss": 0.5})
    run.observe(StepRecord(step=1, version="v1", figures=figures), 1)
    exported = _exported(run)
    assert names.TRAIN_STEP in exported
    assert names.ROUTING_AGREEMENT not in exported
    assert names.ROUTED_TOKEN_FRACTION not in exported


def test_an_moe_run_with_routing_replay_exports_them_from_its_first_step() -> None:
    run = RunMetrics("moe")
    figures = StepFigures().with_trainer_figures(
        {"trained_tokens": 10.0, "routing_agreement": 0.75, "routed_token_fraction": 1.0}
    )
    run.observe(StepRecord(step=1, version="v1", figures=figures), 1)
    lines = generate_latest(run.registry).decode().splitlines()
    assert f"{names.ROUTING_AGREEMENT} 0.75" in lines
    assert f"{names.ROUTED_TOKEN_FRACTION} 1.0" in lines
