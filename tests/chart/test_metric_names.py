"""Every `dressage_*` metric the dashboard and the alert rules query is one the code declares in
`dressage.metrics` (histogram series `_bucket`/`_sum`/`_count` map to their base name)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from dressage import metrics
from tests.chart import dashboard as dash
from tests.chart.tools import ALERTING, one, render

METRIC = re.compile(r"\bdressage_[a-z0-9_]*[a-z0-9]")
"""A `dressage_` name: a metric's, or the job label (`metrics.JOB_LABEL`), which `_names` drops."""
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# Recording-rule names in the tests use `dressage:`; label names never start with `dressage_`.


def declared(name: str) -> bool:
    known = metrics.all_names()
    if name in known:
        return True
    return any(name.endswith(s) and name.removesuffix(s) in known for s in HISTOGRAM_SUFFIXES)


def test_name_check_maps_histogram_series_and_refuses_unknown_names() -> None:
    assert declared(metrics.PROXY_REQUEST_DURATION + "_bucket")
    assert declared(metrics.STALENESS_VERSION_SPAN_MEAN)
    assert not declared("dressage_staleness_version_span_median")
    assert not declared(metrics.STALENESS_VERSION_SPAN_MEAN + "_bucket_total")


def _names(text: str) -> set[str]:
    return set(METRIC.findall(text)) - {metrics.JOB_LABEL}


def test_the_job_label_is_no_metric_name() -> None:
    assert metrics.JOB_LABEL == "dressage_job"
    assert not declared(metrics.JOB_LABEL)


def test_dashboard_queries_use_declared_metric_names() -> None:
    board = dash.load()
    text = " ".join(expr for _, expr in dash.panel_queries(board))
    text += " ".join(sel for _, sel in dash.variable_selectors(board))
    names = _names(text)
    assert len(names) >= 20
    assert sorted(n for n in names if not declared(n)) == []


def test_alert_rules_use_declared_metric_names(tmp_path: Path) -> None:
    rule = one(render(ALERTING, tmp_path), "PrometheusRule")
    names = _names(" ".join(r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]))
    assert metrics.JOB_MAX_VERSION_SPAN_LIMIT in names
    assert sorted(n for n in names if not declared(n)) == []


def test_rule_unit_tests_feed_declared_metric_names() -> None:
    """The promtool cases feed the series the code exports, not made-up ones."""
    tests = yaml.safe_load((Path(__file__).parent / "rules_test.yaml").read_text())["tests"]
    series = " ".join(s["series"] for t in tests for s in t["input_series"])
    assert sorted(n for n in _names(series) if not declared(n)) == []
