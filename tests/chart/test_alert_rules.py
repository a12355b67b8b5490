"""The chart's alert rules checked and unit-tested by the real promtool.

The rules are rendered by helm from the chart (so the test covers what users install) with
every scrape the alerts read on, written as a plain Prometheus rule file, then `promtool check
rules` and `promtool test rules` run on it with the cases in rules_test.yaml. Which alerts
other values combinations render is test_alert_sources.py's.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.tools import ALERTING, one, render, require_tool, run_tool

HERE = Path(__file__).resolve().parent
UNIT_TESTS = HERE / "rules_test.yaml"
ALERTS = {
    "DressageVersionSpanAboveLimit",
    "DressageTrainingStalled",
    "DressageJobFailed",
    "DressageEnginesNotReady",
    "DressageEvalBelowBest",
    "DressageOperatorDown",
    "DressageOperatorReconcileErrors",
    "DressageTrainerWaitingForBatches",
    "DressageDroppedGroupsHigh",
    "DressageStalenessFailuresHigh",
    "DressageMismatchKLHigh",
    "DressageStalenessBudgetExceeded",
    "DressageLogprobDiffHigh",
    "DressageRewardNaN",
    "DressageRewardCollapsed",
    "DressageProxyErrorsHigh",
}


def rendered_rule_groups(values: dict[str, Any] | None = None, tmp: Path | None = None) -> Any:
    """The `groups` of the chart's PrometheusRule, every scrape on."""
    enabled = {**ALERTING, "prometheusRule": {**ALERTING["prometheusRule"], **(values or {})}}
    return one(render(enabled, tmp), "PrometheusRule")["spec"]["groups"]


def rendered_rules(values: dict[str, Any] | None = None, tmp: Path | None = None) -> Any:
    return {r["alert"]: r for g in rendered_rule_groups(values, tmp) for r in g["rules"]}


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    """A directory with rules.yaml (rendered with the defaults) and the unit tests."""
    out = tmp_path / "rules"
    out.mkdir()
    groups = rendered_rule_groups(tmp=tmp_path)
    (out / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    shutil.copy(UNIT_TESTS, out / UNIT_TESTS.name)
    return out


def test_promtool_check_rules_accepts_the_rendered_rules(rules_dir: Path) -> None:
    promtool = require_tool("promtool")
    result = run_tool([promtool, "check", "rules", str(rules_dir / "rules.yaml")])
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in result.stdout


def test_promtool_unit_tests_pass(rules_dir: Path) -> None:
    promtool = require_tool("promtool")
    result = run_tool([promtool, "test", "rules", str(rules_dir / UNIT_TESTS.name)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_unit_tests_fail_when_an_alert_is_broken(rules_dir: Path) -> None:
    """The unit tests bite: raising a threshold tenfold makes them fail."""
    promtool = require_tool("promtool")
    rules_file = rules_dir / "rules.yaml"
    rules_file.write_text(rules_file.read_text().replace("> 0.5", "> 5"))
    result = run_tool([promtool, "test", "rules", str(rules_dir / UNIT_TESTS.name)])
    assert result.returncode != 0
    assert "DressageStalenessFailuresHigh" in result.stdout + result.stderr
    assert "DressageTrainerWaitingForBatches" in result.stdout + result.stderr


def test_every_alert_has_a_firing_and_a_silent_unit_test(tmp_path: Path) -> None:
    alerts = set(rendered_rules(tmp=tmp_path))
    cases = [
        case
        for test in yaml.safe_load(UNIT_TESTS.read_text())["tests"]
        for case in test["alert_rule_test"]
    ]
    fires = {c["alertname"] for c in cases if c["exp_alerts"]}
    silent = {c["alertname"] for c in cases if not c["exp_alerts"]}
    assert alerts == ALERTS
    assert fires == alerts
    assert silent == alerts


def test_the_per_job_alerts_name_the_job_by_namespace_and_dressage_job(tmp_path: Path) -> None:
    operator_wide = {"DressageOperatorDown", "DressageOperatorReconcileErrors"}
    for name, rule in rendered_rules(tmp=tmp_path).items():
        if name not in operator_wide:
            assert "by (namespace, dressage_job)" in rule["expr"], name
            assert "$labels.dressage_job" in rule["annotations"]["description"], name


def test_alerts_follow_their_values(tmp_path: Path) -> None:
    rules = rendered_rules(
        {
            "operatorTargetSelector": 'job="custom"',
            "alerts": {
                "jobFailed": {"enabled": False},
                "droppedGroupsHigh": {"threshold": 0.3, "window": "5m", "severity": "page"},
                "rewardCollapsed": {"dropFraction": 0.25, "window": "1h", "lookback": "1d"},
                "proxyErrorsHigh": {"threshold": 0.01, "for": "2m"},
            },
        },
        tmp_path,
    )
    assert "DressageJobFailed" not in rules
    dropped = rules["DressageDroppedGroupsHigh"]
    assert "[5m]" in dropped["expr"]
    assert "> 0.3" in dropped["expr"]
    assert dropped["labels"]["severity"] == "page"
    assert 'up{job="custom"}' in rules["DressageOperatorDown"]["expr"]
    collapsed = rules["DressageRewardCollapsed"]
    assert "(1 - 0.25) *" in collapsed["expr"]
    assert "[1h])[1d:5m]" in collapsed["expr"]
    assert "more than 25% from its best over the last 1d" in collapsed["annotations"]["description"]
    proxy = rules["DressageProxyErrorsHigh"]
    assert "> 0.01" in proxy["expr"]
    assert proxy["for"] == "2m"
