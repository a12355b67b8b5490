"""The dashboard's SGLang engines row queries only SGLang metrics declared in
`dressage.metrics.sglang`: the names every tested release exports (the contract tier reads each
release's collector: `tests/contract/test_engine_metrics.py`) and the embedded engine serves
(`tests/integration/test_engine_metrics.py`). The job list comes from the operator's per-job
phase series, which exist for every job it knows."""

from __future__ import annotations

import re

from dressage import metrics as m
from dressage.api.sglang import SGLANG_TESTED_RELEASES
from dressage.metrics import sglang
from tests.chart import dashboard as dash

SGLANG_NAME = re.compile(r"\bsglang:[a-z0-9_:]*[a-z0-9]")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def _base(name: str) -> str:
    for suffix in HISTOGRAM_SUFFIXES:
        stem = name.removesuffix(suffix)
        if stem != name and stem in sglang.names():
            return stem
    return name


def _row(title: str) -> list[tuple[str, str]]:
    """(panel title, query) of every panel of the row titled `title`."""
    row: list[tuple[str, str]] = []
    current = None
    for panel in dash.load()["panels"]:
        if panel["type"] == "row":
            current = panel["title"]
        elif current == title:
            row += [(panel["title"], t["expr"]) for t in panel["targets"]]
    return row


def test_a_label_set_for_every_release_of_the_supported_range() -> None:
    """Each release's labels come from the table of release facts (0.5.19 between the tested
    releases once raised KeyError here and in the embedded engine)."""
    for release in (*SGLANG_TESTED_RELEASES, "0.5.19"):
        assert sglang.release_labels(release).scheduler[:2] == ("model_name", "engine_type")


def test_dashboard_queries_only_declared_sglang_metrics() -> None:
    text = " ".join(expr for _, expr in dash.panel_queries(dash.load()))
    used = {_base(name) for name in SGLANG_NAME.findall(text)}
    assert used - sglang.names() == set()
    assert len(used) >= 8


def test_engine_row_shows_queue_running_kv_cache_throughput_and_latencies() -> None:
    queries = " ".join(expr for _, expr in _row("SGLang engines"))
    for name in (
        sglang.NUM_QUEUE_REQS,
        sglang.NUM_RUNNING_REQS,
        sglang.TOKEN_USAGE,
        sglang.GEN_THROUGHPUT,
        sglang.TIME_TO_FIRST_TOKEN + "_bucket",
        sglang.E2E_REQUEST_LATENCY + "_bucket",
    ):
        assert name in queries, name


def test_dcgm_panels_keep_to_the_jobs_engine_pods() -> None:
    dcgm = [(title, expr) for title, expr in _row("SGLang engines") if "DCGM_FI_DEV_" in expr]
    assert {expr.split("{")[0].split("(")[-1] for _, expr in dcgm} == {
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
    }
    for title, expr in dcgm:
        assert "on (namespace, pod) group_left (dressage_job)" in expr, title
        assert f'{m.JOB_LABEL}=~"$job"' in expr, title


def test_job_list_comes_from_the_operators_phase_series() -> None:
    variables = {v["name"]: v for v in dash.load()["templating"]["list"]}
    assert variables["job"]["query"]["query"] == (
        f'label_values({m.JOB_PHASE}{{namespace=~"$namespace"}}, {m.JOB_LABEL})'
    )
    assert variables["namespace"]["query"]["query"] == f"label_values({m.JOB_PHASE}, namespace)"
