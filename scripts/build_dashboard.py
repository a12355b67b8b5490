"""Build the Grafana dashboard of the Helm chart from the metric names in `dressage.metrics`.

The dashboard JSON (`charts/dressage-operator/dashboards/dressage.json`) is generated, not
hand-edited: every query is written with the metric-name constants, so a renamed metric
cannot silently leave a panel empty, and every declared step figure (`dressage.api.figures`)
that no hand-made panel shows gets a panel of its own in the "Every step figure" row.
`tests/chart/test_dashboard.py` regenerates it and fails on a difference. Run
`python scripts/build_dashboard.py` after changing a panel or a figure.

The rows are written in `scripts/dashboard/`, one module per concern; `dashboard.layout` holds
the label conventions and selectors their queries share.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from dashboard import (  # noqa: E402
    engines,
    evaluation,
    operator_health,
    serving,
    staleness,
    step_figures,
    training,
)
from dashboard.layout import J, Layout, variable  # noqa: E402

from dressage import metrics as m  # noqa: E402
from dressage.api.figures import StepFigures  # noqa: E402

OUTPUT = ROOT / "charts" / "dressage-operator" / "dashboards" / "dressage.json"
UID = "dressage-overview"


def build(declaration: type[StepFigures] = StepFigures) -> dict[str, Any]:
    """The dashboard as a JSON-ready dict (for the figures of `declaration`)."""
    d = Layout()
    staleness.add(d)
    training.add(d)
    evaluation.add(d)
    serving.add(d)
    engines.add(d)
    step_figures.add(d, declaration)
    operator_health.add(d)

    return {
        "annotations": {"list": []},
        "description": "Dressage async RL jobs: staleness control, training progress, held-out "
        "evaluation, proxy and engines, SGLang's own engine metrics, operator health.",
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "links": [],
        "panels": d.panels,
        "refresh": "30s",
        "schemaVersion": 39,
        "tags": ["dressage", "rl"],
        "templating": {
            "list": [
                {
                    "current": {},
                    "hide": 0,
                    "includeAll": False,
                    "label": "Data source",
                    "multi": False,
                    "name": "datasource",
                    "options": [],
                    "query": "prometheus",
                    "refresh": 1,
                    "regex": "",
                    "type": "datasource",
                },
                # From the operator's phase series: every job it knows, from its first
                # reconcile on, Pending or Failed before any step included.
                variable("namespace", "Namespace", f"label_values({m.JOB_PHASE}, namespace)"),
                variable(
                    "job",
                    "Job",
                    f'label_values({m.JOB_PHASE}{{namespace=~"$namespace"}}, {J})',
                ),
            ]
        },
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "title": "Dressage",
        "uid": UID,
        "version": 1,
    }


def render() -> str:
    """The dashboard file's exact text."""
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


def main() -> int:
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(render())
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
