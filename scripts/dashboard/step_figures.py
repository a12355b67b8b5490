"""The "Every step figure" row: a panel for each declared step figure (`dressage.api.figures`)
that no hand-made panel queries, so a new figure reaches the dashboard with its declaration."""

from __future__ import annotations

from dashboard.layout import JL, POD, J, Layout, rate
from dressage.api.figures import FigureKind, StepFigures, figures_of


def add(d: Layout, declaration: type[StepFigures]) -> None:
    """A panel for every declared step figure no panel above queries yet, so a new figure
    reaches the dashboard with its declaration: a gauge per job, a counter's rate per job, a
    by-reason counter's rate per job and reason."""
    queried = " ".join(t["expr"] for panel in d.panels for t in panel.get("targets", []))
    missing = [f for f in figures_of(declaration) if f.metric not in queried]
    if not missing:
        return
    d.row("Every step figure")
    for f in missing:
        if f.kind is FigureKind.GAUGE and f.label is not None:
            by = f"{J}, {f.label}"
            target = (f"avg by ({by}) ({f.metric}{{{POD}}})", f"{JL} {{{{{f.label}}}}}")
        elif f.kind is FigureKind.GAUGE:
            target = (f"avg by ({J}) ({f.metric}{{{POD}}})", f"{JL}")
        elif f.kind is FigureKind.COUNTER:
            target = (rate(f.metric, POD, J), f"{JL}")
        else:
            target = (rate(f.metric, POD, f"{J}, reason"), f"{JL} {{{{reason}}}}")
        per_second = "" if f.kind is FigureKind.GAUGE else " per second"
        d.timeseries(f"{f.key} ({f.unit}{per_second})", f"{f.help}.", [target], width=8)
