"""Read the chart's Grafana dashboard and turn its queries into plain PromQL for the tests."""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from tests.chart.tools import CHART, ROOT

DASHBOARD = CHART / "dashboards" / "dressage.json"
BUILDER = ROOT / "scripts" / "build_dashboard.py"

# What Grafana substitutes before sending a query: one namespace and job, a fixed interval.
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$namespace": "ml",
    "$job": "tiny",
}
LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>\w+)\)$")


def load() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def builder() -> ModuleType:
    """scripts/build_dashboard.py as a module."""
    spec = importlib.util.spec_from_file_location("build_dashboard", BUILDER)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel that queries data (rows excluded, nested row panels included)."""
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def panel_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, raw expression) for every panel target."""
    return [(p["title"], t["expr"]) for p in panels(dashboard) for t in p["targets"]]


def variable_selectors(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(variable name, the series selector inside its `label_values(...)` query)."""
    found = []
    for var in dashboard["templating"]["list"]:
        if var["type"] != "query":
            continue
        match = LABEL_VALUES.match(var["query"]["query"])
        assert match, f"variable {var['name']}: not a label_values() query"
        found.append((var["name"], match["selector"]))
    return found


def substitute(expr: str) -> str:
    """The expression as Grafana sends it, with the dashboard variables filled in."""
    for name in sorted(GRAFANA_VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, GRAFANA_VARIABLES[name])
    assert "$" not in expr, f"unsubstituted variable in {expr!r}"
    return expr


def all_promql(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel query and variable selector, variables substituted."""
    queries = [(title, substitute(expr)) for title, expr in panel_queries(dashboard)]
    queries += [(f"variable {n}", substitute(sel)) for n, sel in variable_selectors(dashboard)]
    return queries
