"""No alert of the chart waits on series nothing scrapes, in every supported combination of
the monitoring values, and every alert links to a runbook section that exists.

The chart renders an alert only when the target producing its series is scraped: the
operator's /metrics by the ServiceMonitor, the trainer's and the proxy's by the PodMonitor (the
proxy's with `proxyPort`), or any of them by the user's own Prometheus configuration
(`prometheusRule.scrapedElsewhere`). Which series each target produces is read from the code's
own registries (the operator's, a run's and the proxy's), not from a list kept by hand. An
expression over series that are never scraped would never fire, and `absent()` over them (as
`DressageOperatorDown` uses on `up`) would fire forever.
"""

from __future__ import annotations

import itertools
import re
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from dressage_operator.metrics import OperatorMetrics
from prometheus_client import CollectorRegistry

from dressage import metrics
from dressage.orchestrator.metrics import RunMetrics
from dressage.proxy.metrics import ProxyMetrics
from tests.chart import dashboard as dash
from tests.chart.tools import ROOT, by_kind, helm_template, render

RUNBOOKS = ROOT / "docs" / "runbooks.md"
DEFAULT_RUNBOOK_BASE = "https://github.com/dressage/dressage/blob/main/docs/runbooks.md"
SERIES = re.compile(r"\b(?:dressage_[a-z0-9_]*[a-z0-9]|up)\b(?!\s*[=!~])")
"""A series name in an expression: a `dressage_` name or `up`, not a label matcher."""
TARGETS = ("operator", "trainer", "proxy")
OPTIONAL = {"DressageTrainerWaitingForBatches": {"operator"}}
"""Series an alert reads only while their target is scraped: the operator's rollout mode,
which leaves `sync` jobs out of the trainer's wait."""


def _series_names(registry: CollectorRegistry) -> frozenset[str]:
    """The series names a registry's /metrics serves (counters with `_total`, histograms
    with their `_bucket`/`_sum`/`_count`), labelled families with no sample yet included."""
    names: set[str] = set()
    for family in registry.collect():
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names.update(family.name + s for s in ("_bucket", "_sum", "_count"))
        else:
            names.add(family.name)
    return frozenset(names)


@cache
def produced() -> dict[str, frozenset[str]]:
    """The series each scrape target produces; the operator's target also gives `up`, the
    series the rules read of a target's health."""
    return {
        "operator": _series_names(OperatorMetrics().registry) | {"up"},
        "trainer": _series_names(RunMetrics("job").registry),
        "proxy": _series_names(ProxyMetrics(lambda: 0.0).registry),
    }


def monitoring_values(
    service_monitor: bool,
    pod_monitor: bool,
    proxy_port: str = "http",
    elsewhere: dict[str, bool] | None = None,
    **rule: Any,
) -> dict[str, Any]:
    return {
        "metrics": {
            "serviceMonitor": {"enabled": service_monitor},
            "podMonitor": {"enabled": pod_monitor, "proxyPort": proxy_port},
        },
        "prometheusRule": {
            "enabled": True,
            "scrapedElsewhere": {t: False for t in TARGETS} | (elsewhere or {}),
            **rule,
        },
    }


def scraped(values: dict[str, Any]) -> set[str]:
    """The targets whose series a Prometheus has under these values."""
    m, elsewhere = values["metrics"], values["prometheusRule"]["scrapedElsewhere"]
    pod = m["podMonitor"]
    return {
        t
        for t, on in (
            ("operator", m["serviceMonitor"]["enabled"]),
            ("trainer", pod["enabled"]),
            ("proxy", pod["enabled"] and bool(pod["proxyPort"])),
        )
        if on or elsewhere[t]
    }


def rendered_rules(values: dict[str, Any], tmp: Path) -> dict[str, dict[str, Any]]:
    rules = [
        rule
        for obj in by_kind(render(values, tmp), "PrometheusRule")
        for group in obj["spec"]["groups"]
        for rule in group["rules"]
    ]
    return {rule["alert"]: rule for rule in rules}


def sources(expr: str) -> set[str]:
    """The targets an expression reads series of (each of its series comes from one)."""
    found = set()
    for name in set(SERIES.findall(expr)) - {metrics.JOB_LABEL}:
        owners = {t for t, names in produced().items() if name in names}
        assert owners, f"{name} is produced by no scrape target"
        found |= owners
    return found


@cache
def every_alert() -> dict[str, set[str]]:
    """Each alert of the chart (everything scraped) and the targets its expression reads."""
    with tempfile.TemporaryDirectory() as tmp:
        rules = rendered_rules(monitoring_values(True, True), Path(tmp))
    return {name: sources(rule["expr"]) for name, rule in rules.items()}


def required(name: str) -> set[str]:
    """The targets an alert cannot do without."""
    return every_alert()[name] - OPTIONAL.get(name, set())


def test_every_target_serves_series_and_the_alerts_read_all_three() -> None:
    assert all(produced()[t] for t in TARGETS)
    assert set().union(*every_alert().values()) == set(TARGETS)
    # Each alert needs one target's series, so one scrape decides whether it can fire.
    assert all(len(required(name)) == 1 for name in every_alert()), every_alert()
    assert every_alert()["DressageTrainerWaitingForBatches"] == {"trainer", "operator"}


COMBINATIONS = [
    monitoring_values(sm, pm, port)
    for sm, pm, port in itertools.product((False, True), (False, True), ("http", ""))
    if sm or pm
] + [
    monitoring_values(
        False, False, elsewhere={"operator": True}, operatorTargetSelector='job="op"'
    ),
    monitoring_values(False, False, elsewhere={"trainer": True}),
    monitoring_values(False, False, elsewhere={"proxy": True}),
    monitoring_values(True, False, elsewhere={"trainer": True, "proxy": True}),
    monitoring_values(False, True, "", elsewhere={"proxy": True}),
]


@pytest.mark.parametrize("values", COMBINATIONS, ids=lambda v: "+".join(sorted(scraped(v))))
def test_alerts_are_rendered_exactly_when_their_series_are_scraped(
    values: dict[str, Any], tmp_path: Path
) -> None:
    on = scraped(values)
    rules = rendered_rules(values, tmp_path)
    expected = {name for name in every_alert() if required(name) <= on}
    assert set(rules) == expected
    for name, rule in rules.items():
        assert sources(rule["expr"]) <= on, name
        if "absent(" in rule["expr"]:
            # absent() fires when nothing answers: only over the operator's own `up`, and
            # only while the operator is scraped.
            assert re.fullmatch(r"absent\(up\{[^}]*\} == 1\)", rule["expr"].strip()), name


def test_nothing_scraped_is_refused_with_what_to_enable(tmp_path: Path) -> None:
    result = helm_template(monitoring_values(False, False), tmp_path)
    assert result.returncode != 0
    assert "metrics.serviceMonitor" in result.stderr
    assert "prometheusRule.scrapedElsewhere" in result.stderr


def test_an_operator_scraped_elsewhere_needs_its_up_selector(tmp_path: Path) -> None:
    """Without the selector DressageOperatorDown would look for the ServiceMonitor's job
    label, which a scrape of the user's own never gives: it would fire forever."""
    alone = monitoring_values(False, False, elsewhere={"operator": True})
    result = helm_template(alone, tmp_path)
    assert result.returncode != 0
    assert "prometheusRule.operatorTargetSelector" in result.stderr
    alone["prometheusRule"]["alerts"] = {"operatorDown": {"enabled": False}}
    assert "DressageOperatorDown" not in rendered_rules(alone, tmp_path)
    selected = monitoring_values(
        False, False, elsewhere={"operator": True}, operatorTargetSelector='job="my-operator"'
    )
    down = rendered_rules(selected, tmp_path)["DressageOperatorDown"]
    assert down["expr"].strip() == 'absent(up{job="my-operator"} == 1)'


def test_no_prometheus_rule_without_prometheus_rule_enabled(tmp_path: Path) -> None:
    values = monitoring_values(True, True)
    values["prometheusRule"]["enabled"] = False
    assert by_kind(render(values, tmp_path), "PrometheusRule") == []


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation but `-` and `_`
    dropped, spaces as `-`."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def runbook_anchors() -> set[str]:
    headings = re.findall(r"^#{1,6} (.+)$", RUNBOOKS.read_text(encoding="utf-8"), re.MULTILINE)
    return {github_anchor(h) for h in headings}


def test_every_alert_links_to_its_runbook_section(tmp_path: Path) -> None:
    rules = rendered_rules(monitoring_values(True, True), tmp_path)
    anchors = runbook_anchors()
    for name, rule in rules.items():
        annotations = rule["annotations"]
        assert annotations["summary"], name
        assert annotations["description"], name
        base, _, anchor = annotations["runbook_url"].partition("#")
        assert base == DEFAULT_RUNBOOK_BASE, name
        assert anchor == name.lower(), name
        assert anchor in anchors, f"{name}: no section #{anchor} in docs/runbooks.md"
    # One section per alert, and none for an alert the chart does not have.
    sections = re.findall(r"^## (Dressage\w+)$", RUNBOOKS.read_text(encoding="utf-8"), re.M)
    assert sorted(sections) == sorted(rules)


def test_the_runbook_base_url_is_a_value(tmp_path: Path) -> None:
    values = monitoring_values(True, True, runbookBaseUrl="https://wiki.example.com/dressage")
    for name, rule in rendered_rules(values, tmp_path).items():
        expected = f"https://wiki.example.com/dressage#{name.lower()}"
        assert rule["annotations"]["runbook_url"] == expected


def test_the_default_runbook_base_is_this_repository_s_page() -> None:
    chart = yaml.safe_load((ROOT / "charts" / "dressage-operator" / "Chart.yaml").read_text())
    assert f"{chart['home']}/blob/main/docs/runbooks.md" == DEFAULT_RUNBOOK_BASE
    assert RUNBOOKS.is_file()


def test_the_panels_a_runbook_names_are_the_dashboard_s() -> None:
    """Runbooks quote dashboard panels by title ("Engine health"): each one exists."""
    text = re.sub(r"```.*?```", "", RUNBOOKS.read_text(encoding="utf-8"), flags=re.S)
    quoted = {" ".join(q.split()) for q in re.findall(r'"([^"]+)"', text)}
    titles = {p["title"] for p in dash.panels(dash.load())}
    named = {q for q in quoted if q[0].isalnum() and q[-1] not in " ,;"} - {"Dressage"}
    assert len(named) >= 20
    assert sorted(named - titles) == []


def test_the_chart_readme_lists_every_alert(tmp_path: Path) -> None:
    readme = (ROOT / "charts" / "dressage-operator" / "README.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `(Dressage\w+)` \|", readme, re.M))
    assert listed == set(rendered_rules(monitoring_values(True, True), tmp_path))


_COUNTS = [
    *("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"),
    *("eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen"),
    *("eighteen", "nineteen", "twenty"),
]


def test_the_readme_counts_the_alerts_the_chart_renders(tmp_path: Path) -> None:
    """The README's "N alerts" is the number of alerts the chart's PrometheusRule holds, so an
    alert added or removed fails here until the README says so."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    said = re.findall(r"\b(\w+) alerts\b", readme)
    counts = [int(w) if w.isdigit() else _COUNTS.index(w) for w in said if w in _COUNTS]
    assert counts, "the README does not say how many alerts the chart has"
    rendered = len(rendered_rules(monitoring_values(True, True), tmp_path))
    assert set(counts) == {rendered}, f"the README says {counts}, the chart renders {rendered}"
