"""A step's seconds, tokens and the ratios taken from them, through the step record, the job's
`/metrics`, the step line and the run report.

The loop measures the seconds (`StepRecord`), the trainer counts the trained tokens, the
collector the tokens its completed groups generated; the ratios (trained tokens per second,
generated tokens per trained token, the fraction of the step spent waiting for the batch)
are computed from a step's own counts and, in the report, from the run's sums.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from dressage import metrics as names
from dressage.api.figure_model import read_declaration
from dressage.api.figures import StepFigures, counter, figure, gauge, ratios, totals
from dressage.data.groups import Group
from dressage.data.samples import Sample
from dressage.orchestrator.loop import StepRecord
from dressage.orchestrator.metrics import RunMetrics
from dressage.rollout.stats import CollectorStats
from dressage.runner.local import progress_line
from dressage.runner.report import summarize


def _step(
    step: int, *, trained: int, generated: int, wait: float, train: float, publish: float
) -> StepRecord:
    figures = StepFigures(generated_tokens=generated).with_trainer_figures(
        {"trained_tokens": float(trained), "loss": 0.25, "grad_norm": 1.5}
    )
    return StepRecord(
        step=step,
        version=f"v{step}",
        figures=figures,
        rollout_seconds=wait,
        train_seconds=train,
        publish_seconds=publish,
    )


def test_a_steps_seconds_and_ratios_are_its_own_figures() -> None:
    record = _step(1, trained=400, generated=600, wait=3.0, train=1.5, publish=0.5)
    f = record.figures
    assert (f.step_seconds, f.rollout_seconds, f.train_seconds, f.publish_seconds) == (
        5.0,
        3.0,
        1.5,
        0.5,
    )
    assert f.trained_tokens_per_second == pytest.approx(80.0)  # 400 tokens / 5 s
    assert f.generated_tokens_per_trained_token == pytest.approx(1.5)  # 600 / 400
    assert f.batch_wait_fraction == pytest.approx(0.6)  # 3 s of 5
    written = record.to_dict()
    assert {k: written[k] for k in ("step_seconds", "publish_seconds", "loss", "grad_norm")} == {
        "step_seconds": 5.0,
        "publish_seconds": 0.5,
        "loss": 0.25,
        "grad_norm": 1.5,
    }
    assert (written["trained_tokens"], written["generated_tokens"]) == (400, 600)


def test_the_publish_measured_after_the_record_is_in_its_figures() -> None:
    """The loop commits the record before publishing, then replaces its publish seconds: the
    figures follow the replacement."""
    committed = _step(1, trained=100, generated=100, wait=1.0, train=1.0, publish=0.0)
    assert committed.figures.trained_tokens_per_second == pytest.approx(50.0)
    published = replace(committed, publish_seconds=2.0)
    assert published.figures.step_seconds == 4.0
    assert published.figures.publish_seconds == 2.0
    assert published.figures.trained_tokens_per_second == pytest.approx(25.0)
    assert published.figures.batch_wait_fraction == pytest.approx(0.25)


def test_a_ratio_over_nothing_is_unmeasured_never_zero() -> None:
    record = _step(1, trained=0, generated=30, wait=0.0, train=0.0, publish=0.0)
    f = record.figures
    assert f.trained_tokens_per_second is None  # no seconds
    assert f.batch_wait_fraction is None
    assert f.generated_tokens_per_trained_token is None  # no trained token
    assert "generated_tokens_per_trained_token" not in record.to_dict()
    trained = _step(1, trained=10, generated=0, wait=0.0, train=2.0, publish=0.0)
    assert trained.figures.generated_tokens_per_trained_token == 0.0
    assert trained.figures.batch_wait_fraction == 0.0


def test_metrics_export_the_counters_summed_and_the_latest_steps_gauges() -> None:
    run = RunMetrics("j")
    before = generate_latest(run.registry).decode().splitlines()
    assert f"{names.TRAINED_TOKENS} 0.0" in before  # counters exist from the start
    run.observe(_step(1, trained=400, generated=600, wait=3.0, train=1.5, publish=0.5), 1)
    run.observe(_step(2, trained=200, generated=200, wait=0.5, train=1.0, publish=0.5), 2)
    lines = generate_latest(run.registry).decode().splitlines()
    for line in (
        "dressage_trained_tokens_total 600.0",
        "dressage_generated_tokens_total 800.0",
        "dressage_trainer_step_seconds_total 7.0",
        "dressage_trainer_batch_wait_seconds_total 3.5",
        "dressage_trainer_train_seconds_total 2.5",
        "dressage_trainer_publish_seconds_total 1.0",
        "dressage_trained_tokens_per_second 100.0",  # the latest step's: 200 / 2 s
        "dressage_generated_tokens_per_trained_token 1.0",
        "dressage_trainer_batch_wait_fraction 0.25",
        "dressage_train_loss 0.25",
        "dressage_train_grad_norm 1.5",
    ):
        assert line in lines, line
    kinds = {f.name: f.type for f in text_string_to_metric_families("\n".join(lines) + "\n")}
    assert kinds["dressage_trainer_step_seconds"] == "counter"
    assert kinds["dressage_trained_tokens"] == "counter"
    assert kinds["dressage_trained_tokens_per_second"] == "gauge"


def test_the_reports_ratios_are_the_runs_sums_not_the_mean_of_its_steps() -> None:
    steps = [
        _step(1, trained=400, generated=600, wait=3.0, train=1.5, publish=0.5).to_dict(),
        _step(2, trained=200, generated=200, wait=0.5, train=1.0, publish=0.5).to_dict(),
    ]
    summary = summarize(steps)
    assert (summary["trained_tokens"], summary["step_seconds"]) == (600, 7.0)
    assert summary["trained_tokens_per_second"] == pytest.approx(600 / 7)
    assert summary["generated_tokens_per_trained_token"] == pytest.approx(800 / 600)
    assert summary["batch_wait_fraction"] == pytest.approx(3.5 / 7)
    assert ratios(totals([])) == dict.fromkeys(ratios(totals(steps)), None)


def test_the_step_line_shows_throughput_and_the_wait() -> None:
    record = _step(3, trained=400, generated=600, wait=3.0, train=1.5, publish=0.5)
    line = progress_line(record, 10, [0.5])
    assert "tok/s 80" in line
    assert "wait 0.60" in line
    assert line.endswith("5.0s")


def _group(group_id: str, masks: list[list[int]]) -> Group:
    samples = tuple(
        Sample.build(
            prompt_tokens=[1, 2],
            response_tokens=list(range(len(mask))),
            response_versions=["v0"] * len(mask),
            rollout_log_probs=[0.0] * len(mask),
            loss_mask=mask,
        )
        for mask in masks
    )
    return Group(group_id=group_id, samples=samples)


def test_the_collector_counts_the_generated_tokens_of_every_completed_group() -> None:
    """Generated tokens are the completed groups' model tokens (loss mask 1), counted when a
    group completes, so a group dropped after (here `dropped`) still counts."""
    stats = CollectorStats()
    before = stats.snapshot()
    kept, dropped = _group("a", [[1, 1, 1], [0, 1, 1, 0]]), _group("b", [[1] * 4, [1] * 6])
    stats.completed(kept)
    stats.completed(dropped)
    assert stats.groups_completed == 2
    batch = stats.batch([kept], since=before)
    assert batch.figures.generated_tokens == 5 + 10
    assert stats.batch([], since=stats.snapshot()).figures.generated_tokens == 0


def test_a_ratio_divides_counters_declared_before_it() -> None:
    @dataclass
    class Widgets(StepFigures):
        widgets: int = counter("widgets", "Widgets made")
        widgets_per_token: float | None = gauge(
            "widgets per token", "Widgets per trained token", ratio=("widgets", "trained_tokens")
        )

    assert figure("widgets_per_token", Widgets).ratio_of({"widgets": 3, "trained_tokens": 6}) == 0.5
    made = Widgets(widgets=3, trained_tokens=6).with_ratios()
    assert made.widgets_per_token == 0.5

    @dataclass
    class Wrong(StepFigures):
        widgets_per_loss: float | None = gauge(
            "widgets", "A ratio of a gauge", ratio=("trained_tokens", "loss")
        )

    with pytest.raises(TypeError, match="counters declared before it"):
        read_declaration(Wrong)
