"""The dashboard's building blocks: the label conventions and selectors every row's queries
use, PromQL helpers, the grid layout of panels, and the template variables.

Label conventions the queries rely on:
- job pods are scraped by the chart's PodMonitor, which adds `dressage_job` (`m.JOB_LABEL`,
  from the pod label `dressage.io/job`) and `component`; Prometheus adds `namespace`, `pod`;
- the operator's per-job series carry `namespace` and `dressage_job` too, and its own
  `dressage_operator_*` health series none. Prometheus' `job` stays the scrape job's.
"""

from __future__ import annotations

from typing import Any

from dressage import metrics as m

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
RATE = "$__rate_interval"
# The job's label, its legend, and the selectors of job pods (PodMonitor labels) and of the
# operator's per-job series: the same label on both.
J = m.JOB_LABEL
JL = "{{" + J + "}}"
POD = f'namespace=~"$namespace", {J}=~"$job"'
JOB = POD

Target = tuple[str, str]
"""A query and its legend."""


def rate(name: str, selector: str, by: str) -> str:
    return f"sum by ({by}) (rate({name}{{{selector}}}[{RATE}]))"


def quantile(q: float, histogram: str, selector: str, by: str) -> str:
    return (
        f"histogram_quantile({q}, sum by ({by}, le) "
        f"(rate({histogram}_bucket{{{selector}}}[{RATE}])))"
    )


class Layout:
    """Places panels left to right, row by row, on Grafana's 24-column grid."""

    def __init__(self) -> None:
        self.panels: list[dict[str, Any]] = []
        self._next_id = 1
        self._x = 0
        self._y = 0
        self._row_height = 0

    def _id(self) -> int:
        panel_id = self._next_id
        self._next_id += 1
        return panel_id

    def row(self, title: str) -> None:
        self._newline()
        self.panels.append(
            {
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": self._y},
                "id": self._id(),
                "panels": [],
                "title": title,
                "type": "row",
            }
        )
        self._y += 1

    def _newline(self) -> None:
        self._y += self._row_height
        self._x = 0
        self._row_height = 0

    def _place(self, width: int, height: int) -> dict[str, int]:
        if self._x + width > 24:
            self._newline()
        pos = {"h": height, "w": width, "x": self._x, "y": self._y}
        self._x += width
        self._row_height = max(self._row_height, height)
        return pos

    def timeseries(
        self,
        title: str,
        description: str,
        targets: list[Target],
        unit: str = "short",
        width: int = 12,
        height: int = 8,
        decimals: int | None = None,
    ) -> None:
        defaults: dict[str, Any] = {
            "custom": {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 0, "spanNulls": False},
            "unit": unit,
        }
        if decimals is not None:
            defaults["decimals"] = decimals
        self.panels.append(
            {
                "datasource": DATASOURCE,
                "description": description,
                "fieldConfig": {"defaults": defaults, "overrides": []},
                "gridPos": self._place(width, height),
                "id": self._id(),
                "options": {
                    "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                    "tooltip": {"mode": "multi", "sort": "desc"},
                },
                "targets": [
                    {
                        "datasource": DATASOURCE,
                        "expr": expr,
                        "legendFormat": legend,
                        "range": True,
                        "refId": chr(ord("A") + i),
                    }
                    for i, (expr, legend) in enumerate(targets)
                ],
                "title": title,
                "type": "timeseries",
            }
        )


def variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "allValue": ".*",
        "current": {},
        "datasource": DATASOURCE,
        "definition": query,
        "hide": 0,
        "includeAll": True,
        "label": label,
        "multi": True,
        "name": name,
        "options": [],
        "query": {"qryType": 1, "query": query, "refId": "PrometheusVariableQueryEditor"},
        "refresh": 2,
        "regex": "",
        "sort": 1,
        "type": "query",
    }
