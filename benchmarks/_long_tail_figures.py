"""The long-tail benchmark's figures of one run and of a setting, from the step records a run
wrote (`history.jsonl`) and its engine's counters: rates and step times after the warm-up,
version spans, drops and refusals, length bias (generated against trained mean length, long
samples dropped at the sink), work per trained sample and the reward curve.
`benchmarks/long_tail.py` runs the jobs; this module only reads what they recorded.
"""

from __future__ import annotations

from typing import Any

from _runs import median, percentile, step_seconds

from dressage.api.figures import LENGTH_BUCKETS, figure
from dressage.data.samples import VERSION_SPAN_SAMPLES
from dressage.rollout import ledger

LOGPROB_DIFF = "train_rollout_logprob_abs_diff"
GENERATED_SAMPLES = figure("generated_samples").key
GENERATED_BY_LENGTH = figure("generated_samples_by_length").key
DROPPED_BY_LENGTH = figure("dropped_samples_by_length").key
LEDGER = figure("ledger_tokens").key
UNSEEN = "unseen"
"""The engine's tokens over the steady steps that no step record's ledger holds: mostly
generations in flight (the engine counts a token as it generates it, the ledger once its group
or turn ends), and the earlier turns of a multi-turn trajectory discarded with its failed group.
The proxy's refused and restarted turns are in each step's record (the proxy's lost tokens
read per step, `dressage.rollout.proxy_ledger`), up to the proxy's count after the last
step's read."""
LONG_BUCKETS = LENGTH_BUCKETS[2:]
"""The buckets of the long responses (over 64 tokens: the task's tail at 20x the median)."""


def span_histogram(history: list[dict[str, Any]]) -> dict[int, int]:
    """Trained samples by output version span, summed over `history`'s steps."""
    counts: dict[int, int] = {}
    for record in history:
        for key, value in record.items():
            if key.startswith(VERSION_SPAN_SAMPLES):
                span = int(key.removeprefix(VERSION_SPAN_SAMPLES))
                counts[span] = counts.get(span, 0) + int(value)
    return dict(sorted(counts.items()))


def reward_curve(history: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(seconds since training began, batch reward) at the end of every step."""
    curve: list[tuple[float, float]] = []
    elapsed = 0.0
    for record in history:
        elapsed += step_seconds(record)
        curve.append((round(elapsed, 3), float(record.get("reward", 0.0))))
    return curve


def _total(value: object) -> int:
    """A step figure's count: a plain count, or a by-reason one (`{reason: n}`) summed."""
    if isinstance(value, dict):
        return sum(int(n) for n in value.values())
    return int(value)  # type: ignore[call-overload]


def ledger_per_trained_token(
    history: list[dict[str, Any]], engine_tokens: float | None
) -> dict[str, float]:
    """The token ledger of `history`'s steps, each account per trained token (`trained` is
    1), and `unseen`: the engine's tokens over the same steps beyond the ledger's."""
    entries: dict[str, float] = {}
    for h in history:
        for key, value in h.get(LEDGER, {}).items():
            entries[key] = entries.get(key, 0.0) + float(value)
    accounts = ledger.accounts(entries)
    trained = accounts["trained"]
    if not trained:
        return {}
    out = {name: n / trained for name, n in accounts.items()}
    if engine_tokens is not None:
        out[UNSEEN] = max(0.0, engine_tokens - ledger.total(entries)) / trained
    return out


def ledger_medians(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Each ledger account's tokens per trained token, the median over `runs` that have it."""
    out: dict[str, float] = {}
    for name in (*ledger.ACCOUNTS, UNSEEN):
        values = [r["ledger_per_trained_token"][name] for r in runs if name in r.get(
            "ledger_per_trained_token", {}
        )]
        value = median(values)
        if value is not None:
            out[name] = value
    return out


def run_figures(
    history: list[dict[str, Any]], engine: dict[str, float | None], *, warmup: int = 1
) -> dict[str, Any]:
    """One run's figures over its steps after the first `warmup` (the steady state), with its
    engine's utilisation over the same window; the reward curve covers every step."""
    steady = history[warmup:]
    times = [step_seconds(h) for h in steady]
    samples = sum(float(h.get("samples", 0.0)) for h in steady)
    seconds = sum(times)
    spans = span_histogram(steady)
    counted = sum(spans.values())
    steady_tokens = sum(float(h.get("trained_tokens", 0.0)) for h in steady)
    drops: dict[str, int] = {}
    for h in steady:
        for reason, count in h.get("dropped_groups", {}).items():
            drops[reason] = drops.get(reason, 0) + int(count)
    diffs = [float(h[LOGPROB_DIFF]) for h in steady if LOGPROB_DIFF in h]
    curve = reward_curve(history)
    late = [r for t, r in curve if t >= curve[-1][0] / 2] if curve else []
    generated_tokens = sum(float(h.get("generated_tokens", 0.0)) for h in steady)
    generated_samples = sum(float(h.get(GENERATED_SAMPLES, 0.0)) for h in steady)
    by_length = {
        name: sum(int(h.get(key, {}).get(bucket, 0)) for h in steady for bucket in LONG_BUCKETS)
        for name, key in (("generated", GENERATED_BY_LENGTH), ("dropped", DROPPED_BY_LENGTH))
    }
    engine_tokens = engine.get("engine_tokens")
    prefill = engine.get("engine_prefill_tokens")
    # CPU per trained sample by process, and the seconds per step each process waited for a
    # core (other work on the machine taking it).
    cpu = {
        key.replace("cpu_s_", "cpu_ms_per_sample_"): 1000 * value / samples
        for key, value in engine.items()
        if key.startswith("cpu_s_") and not key.endswith("_wait") and value is not None and samples
    }
    cpu.update(
        {
            key.replace("cpu_s_", "wait_s_per_step_").removesuffix("_wait"): value / len(steady)
            for key, value in engine.items()
            if key.startswith("cpu_s_") and key.endswith("_wait") and value is not None and steady
        }
    )
    return {
        **cpu,
        "steps": len(history),
        "steps_measured": len(steady),
        "samples_per_s": samples / seconds if seconds > 0 else None,
        "step_seconds": times,
        "median_step_s": median(times),
        "p99_step_s": percentile(times, 99),
        "median_rollout_wait_s": median([float(h["rollout_seconds"]) for h in steady]),
        "median_train_s": median([float(h["train_seconds"]) for h in steady]),
        **engine,
        "engine_tokens_per_trained_token": (
            engine_tokens / steady_tokens if engine_tokens is not None and steady_tokens else None
        ),
        "prefill_tokens_per_trained_sample": (
            prefill / samples if prefill is not None and samples else None
        ),
        "version_spans": {str(k): v for k, v in spans.items()},
        "multi_version_share": (
            sum(v for k, v in spans.items() if k > 1) / counted if counted else None
        ),
        "max_version_span": max(spans) if spans else None,
        "logprob_abs_diff": sum(diffs) / len(diffs) if diffs else None,
        "dropped_groups": drops,
        "dropped_total": sum(drops.values()),
        "staleness_failures": sum(int(h.get("staleness_failures", 0)) for h in steady),
        "failed_groups": sum(_total(h.get("failed_groups", 0)) for h in steady),
        "admissions_held": sum(int(h.get("admissions_held", 0)) for h in steady),
        "trained_mean_response_tokens": steady_tokens / samples if samples else None,
        "generated_mean_response_tokens": (
            generated_tokens / generated_samples if generated_samples else None
        ),
        "length_bias": (
            (steady_tokens / samples) / (generated_tokens / generated_samples)
            if samples and generated_samples and generated_tokens
            else None
        ),
        "long_samples_generated": by_length["generated"],
        "long_samples_dropped": by_length["dropped"],
        "ledger_per_trained_token": ledger_per_trained_token(steady, engine_tokens),
        "reward_curve": curve,
        "reward_late": sum(late) / len(late) if late else None,
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A setting's figures over its repeats: medians of the per-run figures, the p99 over all
    measured steps, span counts, drops and refusals summed."""

    def med(key: str) -> float | None:
        return median([r[key] for r in runs if r.get(key) is not None])

    spans: dict[str, int] = {}
    for r in runs:
        for k, v in r["version_spans"].items():
            spans[k] = spans.get(k, 0) + v
    all_steps = [t for r in runs for t in r["step_seconds"]]
    counted = sum(spans.values())
    drops: dict[str, int] = {}
    for r in runs:
        for reason, count in r["dropped_groups"].items():
            drops[reason] = drops.get(reason, 0) + count
    return {
        "repeats": len(runs),
        "samples_per_s": med("samples_per_s"),
        "samples_per_s_runs": [r["samples_per_s"] for r in runs],
        "engine_busy_fraction": med("engine_busy_fraction"),
        "engine_active_fraction": med("engine_active_fraction"),
        "engine_tokens_per_trained_token": med("engine_tokens_per_trained_token"),
        "prefill_tokens_per_trained_sample": med("prefill_tokens_per_trained_sample"),
        **{
            key: med(key)
            for key in sorted(
                {k for r in runs for k in r if k.startswith(("cpu_ms_per_sample_", "wait_s_"))}
            )
        },
        "median_step_s": med("median_step_s"),
        "p99_step_s": percentile(all_steps, 99),
        "steps_measured": sum(r["steps_measured"] for r in runs),
        "version_spans": dict(sorted(spans.items(), key=lambda kv: int(kv[0]))),
        "multi_version_share": (
            sum(v for k, v in spans.items() if int(k) > 1) / counted if counted else None
        ),
        "max_version_span": max((int(k) for k in spans), default=None),
        "logprob_abs_diff": med("logprob_abs_diff"),
        "dropped_groups": drops,
        "dropped_per_run": med("dropped_total"),
        "staleness_failures": sum(r["staleness_failures"] for r in runs),
        "admissions_held": sum(r["admissions_held"] for r in runs),
        "trained_mean_response_tokens": med("trained_mean_response_tokens"),
        "generated_mean_response_tokens": med("generated_mean_response_tokens"),
        "length_bias": med("length_bias"),
        "long_samples_generated": sum(r.get("long_samples_generated", 0) for r in runs),
        "long_samples_dropped": sum(r.get("long_samples_dropped", 0) for r in runs),
        "ledger_per_trained_token": ledger_medians(runs),
        "reward_late": med("reward_late"),
    }
