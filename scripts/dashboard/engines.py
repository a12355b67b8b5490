"""The SGLang engines row: SGLang's own metrics from each engine's `/metrics` (the PodMonitor's
engine endpoint), by the names both tested releases export (`dressage.metrics.sglang`, read in
each release's collector), which the embedded engine exports too; and, where NVIDIA's DCGM
exporter runs, the engines' GPU utilisation and memory.

SGLang labels its series `model_name`, `engine_type` and ranks; the queries group by the job
and the engine pod, which the PodMonitor adds, so any release's extra labels are summed away.
The DCGM exporter labels its series with the GPU's pod and namespace (its Kubernetes mode,
scraped with honorLabels); they are matched to the job's engine pods through an engine series,
so the DCGM panels show only where the exporter is present and only the job's engines.
"""

from __future__ import annotations

from dashboard.layout import JL, POD, J, Layout, quantile, rate
from dressage.metrics import sglang

BY_POD = f"{J}, pod"
POD_LEGEND = f"{JL} {{{{pod}}}}"
DCGM_GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
DCGM_FB_USED = "DCGM_FI_DEV_FB_USED"
ENGINE_PODS = f"group by (namespace, pod, {J}) ({sglang.NUM_RUNNING_REQS}{{{POD}}})"
"""One series per engine pod of the selected jobs, carrying the job label."""


def _on_engine_pods(agg: str, dcgm: str) -> str:
    return (
        f'{agg} by ({BY_POD}) ({dcgm}{{namespace=~"$namespace"}} '
        f"* on (namespace, pod) group_left ({J}) {ENGINE_PODS})"
    )


def add(d: Layout) -> None:
    """Requests, KV cache, throughput and latencies per engine; DCGM's GPU panels."""
    d.row("SGLang engines")
    d.timeseries(
        "Engine requests running / queued",
        "sglang:num_running_reqs and sglang:num_queue_reqs of each engine's scheduler: a queue "
        "that stays above zero means the engines are the bottleneck (more engines, or a larger "
        "max running requests); an empty queue with the trainer waiting points elsewhere.",
        [
            (f"sum by ({BY_POD}) ({sglang.NUM_RUNNING_REQS}{{{POD}}})", f"{POD_LEGEND} running"),
            (f"sum by ({BY_POD}) ({sglang.NUM_QUEUE_REQS}{{{POD}}})", f"{POD_LEGEND} queued"),
        ],
        width=8,
    )
    d.timeseries(
        "KV-cache usage",
        "sglang:token_usage: the share of each engine's KV-cache tokens in use. Near 1 the "
        "scheduler retracts or queues requests.",
        [(f"max by ({BY_POD}) ({sglang.TOKEN_USAGE}{{{POD}}})", POD_LEGEND)],
        unit="percentunit",
        width=8,
    )
    d.timeseries(
        "Generation throughput (tokens / s)",
        "sglang:gen_throughput as each engine's scheduler measures it, summed per job, and the "
        "rates of its prompt and generated token counters (sglang:prompt_tokens_total, "
        "sglang:generation_tokens_total).",
        [
            (f"sum by ({J}) ({sglang.GEN_THROUGHPUT}{{{POD}}})", f"{JL} gen_throughput"),
            (rate(sglang.GENERATION_TOKENS, POD, J), f"{JL} generated"),
            (rate(sglang.PROMPT_TOKENS, POD, J), f"{JL} prompt"),
        ],
        width=8,
    )
    d.timeseries(
        "Time to first token and request latency (p50 / p99)",
        "sglang:time_to_first_token_seconds and sglang:e2e_request_latency_seconds, from a "
        "request's arrival at the engine, over the job's engines.",
        [
            (quantile(0.5, sglang.TIME_TO_FIRST_TOKEN, POD, J), f"{JL} TTFT p50"),
            (quantile(0.99, sglang.TIME_TO_FIRST_TOKEN, POD, J), f"{JL} TTFT p99"),
            (quantile(0.5, sglang.E2E_REQUEST_LATENCY, POD, J), f"{JL} e2e p50"),
            (quantile(0.99, sglang.E2E_REQUEST_LATENCY, POD, J), f"{JL} e2e p99"),
        ],
        unit="s",
        width=12,
    )
    d.timeseries(
        "Requests finished / s",
        "sglang:num_requests_total's rate per engine: generations the engine finished.",
        [(rate(sglang.NUM_REQUESTS, POD, BY_POD), POD_LEGEND)],
        unit="reqps",
        width=12,
    )
    d.timeseries(
        "GPU utilisation (DCGM)",
        f"{DCGM_GPU_UTIL} of the job's engine pods' GPUs, averaged per pod. Empty without "
        "NVIDIA's DCGM exporter (its Kubernetes pod labels on, scraped with honorLabels) or "
        "with the embedded engine on CPU.",
        [(_on_engine_pods("avg", DCGM_GPU_UTIL), POD_LEGEND)],
        unit="percent",
        width=12,
    )
    d.timeseries(
        "GPU memory used (DCGM)",
        f"{DCGM_FB_USED} (MiB) of the job's engine pods' GPUs, summed per pod: the weights, the "
        "KV cache SGLang reserves (--mem-fraction-static) and the CUDA graphs. Empty without "
        "the DCGM exporter.",
        [(_on_engine_pods("sum", DCGM_FB_USED), POD_LEGEND)],
        unit="decmbytes",
        width=12,
    )
