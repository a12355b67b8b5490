"""SGLang's own Prometheus metrics that Dressage reads, as each supported release exports them.

An SGLang engine started with `--enable-metrics` (the operator always passes it) serves
`/metrics` on its HTTP port; the chart's PodMonitor scrapes it, the dashboard's SGLang engine
row queries it, and the embedded engine (`dressage.engine.embedded.metrics`) exports the same
names with the same labels, so a run without SGLang fills the same panels.

Read in each release's wheel (the package tree is the tag's `python/sglang/`):
- 0.5.2: the metrics in `srt/metrics/collector.py` (`SchedulerMetricsCollector`,
  `TokenizerMetricsCollector`), the scheduler's labels in
  `srt/managers/scheduler_metrics_mixin.py` (`init_metrics`: model_name, engine_type "unified",
  tp_rank, pp_rank, dp_rank only with data parallelism), the tokenizer manager's in
  `srt/managers/tokenizer_manager.py` (model_name);
- 0.5.23: the collector moved to `srt/observability/metrics_collector.py`; the scheduler's
  labels add moe_ep_rank, the tokenizer's `tokenizer_metric_labels()` add engine_type, and the
  per-request series (`prompt_tokens_total`, `generation_tokens_total`, `num_requests_total`,
  `time_to_first_token_seconds`, `e2e_request_latency_seconds`) add `is_streaming`
  ("true"/"false").

The labels differ by release: `release_labels` gives any release's, from the oldest release's
and the label facts of the table of release facts (`dressage.api.sglang.FEATURES`, from 0.5.7
the scheduler's moe_ep_rank, from 0.5.11 the tokenizer's engine_type, from 0.5.17
is_streaming); `tests/contract/test_engine_metrics.py` holds them to the release imported.

Only names both releases export are declared: the dashboard never queries a name one tested
release lacks (`tests/contract/test_engine_metrics.py` reads each release's collector source;
`tests/chart/test_engine_metrics_row.py` holds that the dashboard queries only these).
Names that differ between the releases (0.5.2 `sglang:queue_time_s` against 0.5.23
`sglang:queue_time_seconds`; 0.5.2's counter `sglang:num_aborted_requests`, exported with
`_total`) are left out.
"""

from __future__ import annotations

import dataclasses
from typing import Final, Literal

from dressage.api.sglang import FEATURES, MetricLabel, supports

Kind = Literal["gauge", "counter", "histogram"]
Role = Literal["scheduler", "tokenizer"]


@dataclasses.dataclass(frozen=True)
class SGLangMetric:
    name: str
    """The exported name (a counter's with `_total`)."""
    kind: Kind
    role: Role
    """Which collector exports it: the scheduler's (per rank) or the tokenizer manager's."""
    help: str
    per_request: bool = False
    """Observed once per finished request (the series that gain `is_streaming` in 0.5.23)."""


NUM_RUNNING_REQS: Final = "sglang:num_running_reqs"
NUM_QUEUE_REQS: Final = "sglang:num_queue_reqs"
NUM_USED_TOKENS: Final = "sglang:num_used_tokens"
TOKEN_USAGE: Final = "sglang:token_usage"
GEN_THROUGHPUT: Final = "sglang:gen_throughput"
PROMPT_TOKENS: Final = "sglang:prompt_tokens_total"
GENERATION_TOKENS: Final = "sglang:generation_tokens_total"
NUM_REQUESTS: Final = "sglang:num_requests_total"
TIME_TO_FIRST_TOKEN: Final = "sglang:time_to_first_token_seconds"
E2E_REQUEST_LATENCY: Final = "sglang:e2e_request_latency_seconds"

METRICS: Final = (
    SGLangMetric(NUM_RUNNING_REQS, "gauge", "scheduler", "The number of running requests."),
    SGLangMetric(
        NUM_QUEUE_REQS, "gauge", "scheduler", "The number of requests in the waiting queue."
    ),
    SGLangMetric(NUM_USED_TOKENS, "gauge", "scheduler", "The number of used tokens."),
    SGLangMetric(TOKEN_USAGE, "gauge", "scheduler", "The token usage."),
    SGLangMetric(GEN_THROUGHPUT, "gauge", "scheduler", "The generation throughput (token/s)."),
    SGLangMetric(
        PROMPT_TOKENS, "counter", "tokenizer", "Number of prefill tokens processed.", True
    ),
    SGLangMetric(
        GENERATION_TOKENS, "counter", "tokenizer", "Number of generation tokens processed.", True
    ),
    SGLangMetric(NUM_REQUESTS, "counter", "tokenizer", "Number of requests processed.", True),
    SGLangMetric(
        TIME_TO_FIRST_TOKEN,
        "histogram",
        "tokenizer",
        "Histogram of time to first token in seconds.",
        True,
    ),
    SGLangMetric(
        E2E_REQUEST_LATENCY,
        "histogram",
        "tokenizer",
        "Histogram of End-to-end request latency in seconds",
        True,
    ),
)
"""What the dashboard reads from SGLang, at every tested release."""


@dataclasses.dataclass(frozen=True)
class ReleaseLabels:
    """The labels one release puts on the declared metrics (data parallelism, priority
    scheduling and extra labels off, as the operator starts SGLang)."""

    scheduler: tuple[str, ...]
    tokenizer: tuple[str, ...]
    per_request: tuple[str, ...]
    """Added to the per-request series."""
    engine_type: str = "unified"
    """SGLang's `engine_type` label without disaggregation."""


OLDEST_LABELS: Final = ReleaseLabels(
    scheduler=("model_name", "engine_type", "tp_rank", "pp_rank"),
    tokenizer=("model_name",),
    per_request=(),
)
"""The labels of the oldest supported release (0.5.2); later ones add the labels of
`LABEL_FEATURES`, each from the release the table of release facts names."""
LABEL_FEATURES: Final = tuple(
    feature
    for feature in FEATURES.values()
    if any(isinstance(e, MetricLabel) for e in feature.evidence)
)
"""The release facts that add a label (`dressage.api.sglang.FEATURES`: "from release X", read
in every release's source by `scripts/sglang_release_facts.py`)."""


def release_labels(release: str) -> ReleaseLabels:
    """The labels SGLang `release` (any release of the supported range, a `.postN` after its
    base) puts on the declared metrics: the oldest release's, plus each label that arrived by
    `release`, after them in the order of arrival."""
    added: dict[str, tuple[str, ...]] = {"scheduler": (), "tokenizer": (), "per_request": ()}
    for feature in LABEL_FEATURES:
        if supports(release, feature):
            for evidence in feature.evidence:
                if isinstance(evidence, MetricLabel):
                    added[evidence.collector] += (evidence.label,)
    return ReleaseLabels(
        scheduler=OLDEST_LABELS.scheduler + added["scheduler"],
        tokenizer=OLDEST_LABELS.tokenizer + added["tokenizer"],
        per_request=OLDEST_LABELS.per_request + added["per_request"],
    )


LATENCY_BUCKETS: Final = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
"""0.5.2's default time-to-first-token buckets (`bucket_time_to_first_token`), used here for
both histograms: seconds from a request's arrival."""


def names() -> frozenset[str]:
    """Every declared SGLang metric name."""
    return frozenset(metric.name for metric in METRICS)


def labels_of(metric: SGLangMetric, release: str) -> tuple[str, ...]:
    """The label names `release` puts on `metric`."""
    labels = release_labels(release)
    base = labels.scheduler if metric.role == "scheduler" else labels.tokenizer
    return base + (labels.per_request if metric.per_request else ())
