"""SGLang's own metrics that the dashboard reads (`dressage.metrics.sglang`) are what the release
imported exports: each declared name, of its kind, in the release's collector
(`srt/metrics/collector.py` in 0.5.2, `srt/observability/metrics_collector.py` since), with
`is_streaming` on exactly the per-request series that carry it, and the label keys the release's
scheduler and tokenizer manager give their collectors. The embedded engine serves the same
(`tests/integration/test_engine_metrics.py`); the dashboard queries no other SGLang name
(`tests/chart/test_engine_metrics_row.py`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dressage.metrics import sglang as declared
from tests.contract.support import sglang

pytestmark = pytest.mark.contract

SRT = Path(sglang.__file__).parent / "srt"
COLLECTORS = ("metrics/collector.py", "observability/metrics_collector.py")
"""Where the collector lives, oldest release first."""
SCHEDULER_LABELS = ("managers/scheduler_metrics_mixin.py", "observability/metrics_collector.py")


def _first(candidates: tuple[str, ...], needle: str) -> str:
    """The text of the first candidate file of the release that contains `needle`."""
    for relative in candidates:
        path = SRT / relative
        if path.exists() and needle in (text := path.read_text()):
            return text
    raise AssertionError(f"none of {candidates} holds {needle!r} in this release")


def _call(source: str, name: str) -> tuple[str, str]:
    """The class (`Gauge`, `Counter`, `Histogram`) and the argument text of the metric
    constructor naming `name`."""
    found = re.search(r"\b(Gauge|Counter|Histogram)\(\s*name=\"" + re.escape(name) + r"\"", source)
    assert found is not None, f"{name} is not declared in this release's collector"
    rest = source[found.end() :]
    end = re.search(r"\n\s{8}\)\n", rest)
    return found.group(1), rest[: end.start() if end else 400]


def _dict_keys(source: str, anchor: str) -> set[str]:
    """The string keys of the dict literal around `anchor` (inside it) or right after it."""
    at = source.index(anchor)
    inside = source.rfind("{", 0, at) > source.rfind("}", 0, at)
    opening = source.rfind("{", 0, at) if inside else source.index("{", at)
    closing = source.index("}", opening)
    return set(re.findall(r"\"(\w+)\":", source[opening:closing]))


@pytest.fixture(scope="module")
def collector() -> str:
    return _first(COLLECTORS, "class TokenizerMetricsCollector")


@pytest.mark.parametrize("metric", declared.METRICS, ids=lambda m: m.name)
def test_each_declared_metric_is_in_the_release_collector(
    metric: declared.SGLangMetric, collector: str, sglang_release: str
) -> None:
    kind, arguments = _call(collector, metric.name)
    assert kind.lower() == metric.kind
    labels = declared.labels_of(metric, sglang_release)
    assert ("is_streaming" in arguments) == ("is_streaming" in labels)


def test_scheduler_labels_are_the_release_ones(sglang_release: str) -> None:
    anchor = '"engine_type": engine_type'
    keys = _dict_keys(_first(SCHEDULER_LABELS, anchor), anchor)
    assert keys == set(declared.release_labels(sglang_release).scheduler)


def test_tokenizer_labels_are_the_release_ones(sglang_release: str) -> None:
    """0.5.23 builds them in `tokenizer_metric_labels()`, 0.5.2 where it makes the collector,
    releases between (0.5.19) in the tokenizer manager before it makes the collector
    elsewhere."""
    for relative, anchor in (
        ("observability/metrics_collector.py", "def tokenizer_metric_labels"),
        ("managers/tokenizer_manager.py", "TokenizerMetricsCollector("),
        ("managers/tokenizer_manager.py", '"model_name": get_serving().served_model_name'),
    ):
        path = SRT / relative
        if path.exists() and anchor in (source := path.read_text()):
            break
    else:
        raise AssertionError("the tokenizer manager's metric labels were not found")
    keys = _dict_keys(source, anchor)
    assert keys == set(declared.release_labels(sglang_release).tokenizer)


def test_engine_type_without_disaggregation(sglang_release: str) -> None:
    source = _first(("managers/scheduler_metrics_mixin.py", "disaggregation/utils.py"), "unified")
    assert f'"{declared.release_labels(sglang_release).engine_type}"' in source
