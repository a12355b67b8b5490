"""The chart's alert rules checked and unit-tested by the real promtool.

The rules are rendered by helm from the chart (so the test covers what users install), written
as a plain Prometheus rule file, then `promtool check rules` and `promtool test rules` run on
it with the cases in rules_test.yaml.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.tools import one, render, require_tool, run_tool

HERE = Path(__file__).resolve().parent
UNIT_TESTS = HERE / "rules_test.yaml"


def rendered_rule_groups(values: dict[str, Any] | None = None, tmp: Path | None = None) -> Any:
    """The `groups` of the chart's PrometheusRule."""
    enabled = {"prometheusRule": {"enabled": True, **(values or {})}}
    return one(render(enabled, tmp), "PrometheusRule")["spec"]["groups"]


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
    assert "SUCCESS: 7 rules found" in result.stdout


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


def test_every_alert_has_a_firing_and_a_silent_unit_test(tmp_path: Path) -> None:
    alerts = {
        rule["alert"] for group in rendered_rule_groups(tmp=tmp_path) for rule in group["rules"]
    }
    cases = [
        case
        for test in yaml.safe_load(UNIT_TESTS.read_text())["tests"]
        for case in test["alert_rule_test"]
    ]
    fires = {c["alertname"] for c in cases if c["exp_alerts"]}
    silent = {c["alertname"] for c in cases if not c["exp_alerts"]}
    assert alerts == {
        "DressageVersionSpanAboveLimit",
        "DressageStalenessFailuresHigh",
        "DressageDroppedGroupsHigh",
        "DressageTrainingStalled",
        "DressageJobFailed",
        "DressageOperatorDown",
        "DressageOperatorReconcileErrors",
    }
    assert fires == alerts
    assert silent == alerts


def test_alerts_follow_their_values(tmp_path: Path) -> None:
    groups = rendered_rule_groups(
        {
            "operatorTargetSelector": 'job="custom"',
            "alerts": {
                "jobFailed": {"enabled": False},
                "droppedGroupsHigh": {"threshold": 3, "window": "5m", "severity": "page"},
            },
        },
        tmp_path,
    )
    rules = {rule["alert"]: rule for group in groups for rule in group["rules"]}
    assert "DressageJobFailed" not in rules
    dropped = rules["DressageDroppedGroupsHigh"]
    assert "[5m]" in dropped["expr"]
    assert "> 3" in dropped["expr"]
    assert dropped["labels"]["severity"] == "page"
    assert 'up{job="custom"}' in rules["DressageOperatorDown"]["expr"]
