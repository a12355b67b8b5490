"""The step's figures: one declaration, every name derived from it, every consumer iterating it.

The last test is the contract: a figure added in one line to a declaration reaches `/metrics`,
the step record and `report.json`, the step line, the job's status (as the operator reads it
from `/metrics`), the operator's per-job series and the dashboard's queries.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, fields
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import generate_latest

from dressage import metrics as names
from dressage.api.figures import (
    FigureKind,
    FigureSource,
    StepFigures,
    counter,
    figure,
    figures_of,
    line_parts,
    status_figures,
    totals,
    trainer_keys,
)
from dressage.api.status import AsyncRLJobStatus, StalenessStatus, staleness_status_model


@pytest.mark.parametrize(
    ("name", "key", "metric", "job_metric", "status_key"),
    [
        (
            "version_span_mean",
            "staleness/version_span_mean",
            "dressage_staleness_version_span_mean",
            "dressage_job_staleness_version_span_mean",
            "versionSpanMean",
        ),
        (
            "dropped_groups",
            "dropped_groups",
            "dressage_dropped_groups_total",
            "dressage_job_dropped_groups_total",
            "droppedGroups",
        ),
        (
            "staleness_failures",
            "staleness_failures",
            "dressage_staleness_failures_total",
            "dressage_job_staleness_failures_total",
            "stalenessFailures",
        ),
        ("reward", "reward", "dressage_reward_mean", None, None),
        ("retries", "retries", "dressage_rollout_retries_total", None, None),
    ],
)
def test_one_number_four_names_derived_from_its_declaration(
    name: str, key: str, metric: str, job_metric: str | None, status_key: str | None
) -> None:
    f = figure(name)
    assert (f.key, f.metric) == (key, metric)
    if job_metric is not None:
        assert f.status
        assert (f.job_metric, f.status_key) == (job_metric, status_key)


def test_names_are_unique_and_every_field_is_a_declared_figure() -> None:
    declared = figures_of()
    assert [f.name for f in declared] == [f.name for f in fields(StepFigures)]
    for derive in ("key", "metric", "job_metric", "status_key"):
        values = [getattr(f, derive) for f in declared]
        assert len(set(values)) == len(values), derive
    assert {f.metric for f in declared} <= names.all_names()
    assert not any("/" in f.metric for f in declared)
    assert all(f.metric.endswith("_total") == f.counted for f in declared)


def test_the_status_shows_exactly_the_status_figures_under_their_keys() -> None:
    wire = StalenessStatus().to_wire()
    expected = {"droppedGroups", "droppedGroupsByReason", "stalenessFailures", "drainedTokens"}
    expected |= {"ledgerTokens", "ledgerTokensByReason"}
    assert set(wire) == expected  # gauges stay out until measured
    keys = {info.alias for info in StalenessStatus.model_fields.values()}
    for f in status_figures():
        assert f.status_key in keys
    assert {"versionSpanMean", "versionSpanMax", "versionSpanMin"} <= keys
    status = AsyncRLJobStatus.model_validate({"staleness": {"versionSpanMax": 3.0}})
    assert status.staleness.to_wire()["versionSpanMax"] == 3.0
    with pytest.raises(ValueError, match="versionSpanMedian"):
        StalenessStatus.model_validate({"versionSpanMedian": 1.0})


def test_the_status_documents_what_staleness_failures_count() -> None:
    """Failed prompt-group attempts, not trajectories: one attempt fails however many of its
    trajectories were refused."""
    schema = StalenessStatus.model_json_schema(by_alias=True)["properties"]
    text = schema["stalenessFailures"]["description"]
    assert text.startswith("Prompt-group attempts a staleness control refused")
    assert "version_changed_without_partial_rollout" in text


counts = st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(0, 5))


@given(first=counts, second=counts, retries=st.tuples(st.integers(0, 9), st.integers(0, 9)))
def test_a_batch_carries_what_was_counted_since_the_previous_one(
    first: dict[str, int], second: dict[str, int], retries: tuple[int, int]
) -> None:
    running = StepFigures()
    running.dropped_groups.update(first)
    running.retries += retries[0]
    before = running.copy()
    running.dropped_groups.update(second)
    running.retries += retries[1]
    step = running.since(before)
    assert step.dropped_groups == Counter({k: v for k, v in second.items() if v})
    assert step.retries == retries[1]
    assert before.dropped_groups == Counter({k: v for k, v in first.items() if v})
    run = totals([before.record(), step.record()])
    assert Counter(run["dropped_groups"]) == +running.dropped_groups
    assert run["retries"] == sum(retries)


def test_trainer_figures_are_taken_by_key_and_nothing_else() -> None:
    taken = StepFigures(retries=2).with_trainer_figures(
        {"reward": 0.5, "staleness/version_span_max": 2.0, "groups": 3.0, "undeclared": 1.0}
    )
    assert (taken.reward, taken.version_span_max, taken.groups, taken.retries) == (0.5, 2.0, 3, 2)
    assert isinstance(taken.groups, int)
    record = taken.record()
    assert "undeclared" not in record
    assert "staleness/version_span_mean" not in record  # not measured: left out
    assert record["staleness/version_span_max"] == 2.0
    assert {f.key for f in figures_of() if f.source is FigureSource.TRAINER} == trainer_keys()


def test_the_drained_token_counts_are_declared_trainer_figures_under_their_record_keys() -> None:
    """The trainer's drained-token counts reach `/metrics` and the status like every figure,
    under the record keys the history and the churn benchmark read."""
    from dressage_operator.staleness_scrape import parse_staleness

    from dressage.data.samples import DRAINED_SAMPLES, DRAINED_TOKENS
    from dressage.orchestrator.loop import StepRecord
    from dressage.orchestrator.metrics import RunMetrics

    measured = {DRAINED_TOKENS: 7.0, DRAINED_SAMPLES: 2.0, "undeclared": 0.1}
    assert (DRAINED_TOKENS, DRAINED_SAMPLES) == ("drained_tokens", "drained_samples")
    assert {DRAINED_TOKENS, DRAINED_SAMPLES} <= trainer_keys()
    figures = StepFigures().with_trainer_figures(measured)
    record = StepRecord(step=1, version="v1", figures=figures, extras={"undeclared": 0.1}).to_dict()
    assert (record["drained_tokens"], record["drained_samples"]) == (7, 2)
    run = RunMetrics("j")
    run.observe(StepRecord(step=1, version="v1", figures=figures), version_ordinal=1)
    exposition = generate_latest(run.registry).decode()
    assert f"{names.TRAINED_DRAINED_TOKENS} 7.0" in exposition.splitlines()
    assert "dressage_trained_drained_samples_total 2.0" in exposition.splitlines()
    assert parse_staleness(exposition, "t").to_wire()["drainedTokens"] == 7


@dataclass
class WithWidgets(StepFigures):
    """The declaration plus one counter, added in one line."""

    widgets_refused: int = counter("attempts", "Attempts a widget refused", status=True, line=("widgets", "d"))  # fmt: skip  # noqa: E501


def test_a_figure_declared_in_one_line_reaches_every_consumer(tmp_path: Path) -> None:
    from dressage_operator.metrics import JobMetricsCollector
    from dressage_operator.staleness_scrape import parse_staleness

    from dressage.orchestrator.loop import StepRecord
    from dressage.orchestrator.metrics import RunMetrics
    from dressage.runner.local import progress_line
    from dressage.runner.report import History, write_report
    from tests.chart.dashboard import builder

    widgets = figure("widgets_refused", WithWidgets)
    assert widgets.kind is FigureKind.COUNTER
    assert (widgets.key, widgets.metric) == ("widgets_refused", "dressage_widgets_refused_total")
    assert (widgets.job_metric, widgets.status_key) == (
        "dressage_job_widgets_refused_total",
        "widgetsRefused",
    )
    # The collector counts it; a batch carries what was counted since the last one.
    running = WithWidgets()
    before = running.copy()
    running.widgets_refused += 3
    figures = running.since(before).with_trainer_figures({"reward": 0.5})
    record = StepRecord(step=1, version="v1", figures=figures)

    # /metrics
    run = RunMetrics("j", declaration=WithWidgets)
    run.observe(record, version_ordinal=1)
    exposition = generate_latest(run.registry).decode()
    assert f"{widgets.metric} 3.0" in exposition.splitlines()

    # The step record, history.jsonl and report.json (every step, and the run's total).
    History(tmp_path).append(record.to_dict())
    report = json.loads(write_report(tmp_path, {"name": "j"}, declaration=WithWidgets).read_text())
    assert report["steps"][0]["widgets_refused"] == 3
    assert report["summary"]["widgets_refused"] == 3

    # The step lines: `dressage run`'s, and `dressage train`'s (the same parts).
    assert "widgets 3" in progress_line(record, 10, [0.5])
    assert "widgets 3" in line_parts(record.figures)

    # The job's status, as the operator reads it from the job's /metrics ...
    staleness = parse_staleness(exposition, "t", declaration=WithWidgets)
    assert staleness.to_wire()["widgetsRefused"] == 3
    schema = staleness_status_model(WithWidgets).model_json_schema(by_alias=True)
    assert schema["properties"]["widgetsRefused"]["type"] == "integer"
    # ... and the operator's per-job series.
    jobs = JobMetricsCollector(declaration=WithWidgets)
    jobs.update("ml", "tiny", AsyncRLJobStatus.model_construct(staleness=staleness))
    samples = [s for family in jobs.collect() for s in family.samples]
    assert any(
        s.name == widgets.job_metric and s.labels == {"namespace": "ml", "dressage_job": "tiny"}
        for s in samples
    )
    assert any(s.value == 3.0 for s in samples if s.name == widgets.job_metric)

    # The dashboard's queries and the names the chart's tests check against.
    board = builder().build(declaration=WithWidgets)
    queries = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    assert any(widgets.metric in q for q in queries)
    assert widgets.metric in names.all_names(WithWidgets)
    assert widgets.metric not in names.all_names()
