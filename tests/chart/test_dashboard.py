"""The Grafana dashboard: generated in step, portable (no hard-coded datasource), complete, and
every query valid PromQL (parsed offline by promtool here, and by a live Prometheus in
test_prometheus_queries.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dressage import metrics as m
from tests.chart import dashboard as dash
from tests.chart.tools import require_tool, run_tool

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def test_dashboard_file_is_the_generated_one() -> None:
    """Run `python scripts/build_dashboard.py` when this fails."""
    assert dash.DASHBOARD.read_text() == dash.builder().render()


def _walk(node: Any, path: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = [(path, node)]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out += _walk(value, f"{path}[{i}]")
    return out


def test_every_datasource_is_the_datasource_variable() -> None:
    board = dash.load()
    datasources = [(path, node) for path, node in _walk(board) if path.endswith(".datasource")]
    assert datasources
    for path, node in datasources:
        assert node == DATASOURCE, f"{path} = {node!r}"
    for panel in dash.panels(board):
        assert panel["datasource"] == DATASOURCE, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
    # No provisioning inputs or numeric datasource ids that tie it to one Grafana.
    assert "__inputs" not in board
    assert "datasourceId" not in dash.DASHBOARD.read_text()


def test_variables_are_datasource_namespace_and_job() -> None:
    variables = {v["name"]: v for v in dash.load()["templating"]["list"]}
    assert list(variables) == ["datasource", "namespace", "job"]
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("namespace", "job"):
        assert variables[name]["includeAll"] is True
        assert variables[name]["multi"] is True
    assert "$namespace" in variables["job"]["query"]["query"]


def test_job_pod_queries_filter_by_namespace_and_job() -> None:
    for title, expr in dash.panel_queries(dash.load()):
        if "dressage_operator_" in expr:
            continue  # operator health: one operator, no job
        assert 'namespace=~"$namespace"' in expr, title
        assert 'dressage_job=~"$job"' in expr, title


def test_dashboard_covers_the_required_figures() -> None:
    used = " ".join(expr for _, expr in dash.panel_queries(dash.load()))
    required = [
        m.STALENESS_VERSION_SPAN_MEAN,
        m.STALENESS_VERSION_SPAN_MAX,
        m.STALENESS_VERSION_SPAN_MIN,
        m.STALENESS_VERSION_LAG_MEAN,
        m.STALENESS_VERSION_LAG_TOKEN_MEAN,
        m.STALENESS_VERSION_LAG_MAX,
        m.STALENESS_ADMISSION_LAG_MAX,
        m.JOB_STALENESS_VERSION_LAG_MAX,
        m.DROPPED_GROUPS,
        m.STALENESS_FAILURES,
        m.ROLLOUT_RETRIES,
        m.REWARD_MEAN,
        m.TRAIN_ROLLOUT_LOGPROB_ABS_DIFF,
        m.WEIGHT_VERSION,
        m.TRAIN_STEP,
        m.PROXY_REQUEST_DURATION,
        m.PROXY_REFUSALS,
        m.PROXY_ENGINE_HEALTHY,
        m.OPERATOR_RECONCILE,
        m.OPERATOR_RECONCILE_ERRORS,
        m.OPERATOR_RECONCILE_DURATION,
        m.JOB_PHASE,
        m.MISMATCH_KL_K1,
        m.MISMATCH_KL_K3,
        m.OFF_POLICY_CLIPPED_FRACTION,
        m.OFF_POLICY_MASKED_FRACTION,
        m.IS_ESS_FRACTION,
        m.ROLLOUT_ADMISSIONS_HELD,
        m.ROLLOUT_ADMISSION_WAIT_SECONDS,
        m.JOB_ENGINES,
        m.JOB_ENGINE_SCALE_EVENTS,
        m.JOB_AUTOSCALER_DESIRED_ENGINES,
        m.JOB_TRAINER_WAIT_FRACTION,
        m.JOB_ADMISSION_HELD_FRACTION,
        m.ROUTING_AGREEMENT,
        m.ROUTED_TOKEN_FRACTION,
        m.EVAL_PASS_AT_K,
        m.EVAL_REWARD_MEAN,
        m.JOB_EVAL_LATEST_PASS_AT_1,
        m.JOB_EVAL_BEST_PASS_AT_1,
    ]
    missing = [name for name in required if name not in used]
    assert missing == []
    assert "sum by (dressage_job, reason) (rate(dressage_dropped_groups_total" in used


def test_panels_do_not_overlap() -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in dash.load()["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


def test_every_query_parses_with_promtool(tmp_path: Path) -> None:
    """Each query becomes a recording rule; `promtool check rules` parses its PromQL."""
    promtool = require_tool("promtool")
    queries = dash.all_promql(dash.load())
    rules = [
        {"record": f"dressage:dashboard_query:{i}", "expr": expr}
        for i, (_, expr) in enumerate(queries)
    ]
    rule_file = tmp_path / "dashboard-queries.yaml"
    rule_file.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = run_tool([promtool, "check", "rules", str(rule_file)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def test_promtool_refuses_a_broken_query(tmp_path: Path) -> None:
    """The parse check above can fail."""
    promtool = require_tool("promtool")
    rule_file = tmp_path / "broken.yaml"
    broken = {"record": "dressage:broken", "expr": "sum by (job_name (rate(x[1m]))"}
    rule_file.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [broken]}]}))
    assert run_tool([promtool, "check", "rules", str(rule_file)]).returncode != 0
