"""Prometheus metric names exported by Dressage.

This module is the one list of names: the runtime, the proxy and the operator export them, the
Grafana dashboard and the alert rules query them, and a test keeps those in step. Prometheus
names cannot contain `/`, so the reference's `staleness/version_span_mean` is exported as
`dressage_staleness_version_span_mean`; counters end in `_total`.
"""

from __future__ import annotations

from typing import Final

# --- Job runtime (trainer + collector), exported by `dressage run` and the trainer pods.
STALENESS_VERSION_SPAN_MEAN: Final = "dressage_staleness_version_span_mean"
STALENESS_VERSION_SPAN_MAX: Final = "dressage_staleness_version_span_max"
STALENESS_VERSION_SPAN_MIN: Final = "dressage_staleness_version_span_min"
TRAIN_ROLLOUT_LOGPROB_ABS_DIFF: Final = "dressage_train_rollout_logprob_abs_diff"
REWARD_MEAN: Final = "dressage_reward_mean"
TRAIN_STEP: Final = "dressage_train_step"
WEIGHT_VERSION: Final = "dressage_weight_version"
"""Gauge: ordinal of the latest published weight version (its label is in `_info`)."""
WEIGHT_VERSION_INFO: Final = "dressage_weight_version_info"
ENTROPY: Final = "dressage_entropy"
CLIP_FRACTION: Final = "dressage_clip_fraction"
DROPPED_GROUPS: Final = "dressage_dropped_groups_total"
"""Counter labelled by `reason` (for example `stale_version`, `retries_exhausted`)."""
STALENESS_FAILURES: Final = "dressage_staleness_failures_total"
ROLLOUT_RETRIES: Final = "dressage_rollout_retries_total"
ROLLOUT_GROUPS_COMPLETED: Final = "dressage_rollout_groups_completed_total"
TRAINED_SAMPLES: Final = "dressage_trained_samples_total"
ROLLOUT_FAILURES: Final = "dressage_rollout_failures_total"
"""Counter labelled by `reason`: failed prompt-group attempts (each retry counts)."""
ROLLOUT_ADMISSIONS_HELD: Final = "dressage_rollout_admissions_held_total"
"""Counter: prompt groups whose start admission control held back (each once)."""
ROLLOUT_ADMISSION_WAIT_SECONDS: Final = "dressage_rollout_admission_wait_seconds_total"
"""Counter: seconds the rollout worker waited for admission before starting a group."""
TRAINER_STEP_SECONDS: Final = "dressage_trainer_step_seconds_total"
"""Counter: wall seconds of the trainer's completed steps (waiting for the batch, training,
publishing); the engines' autoscaler divides the two counters below by it."""
TRAINER_BATCH_WAIT_SECONDS: Final = "dressage_trainer_batch_wait_seconds_total"
"""Counter: of those, the seconds trainer rank 0 waited for its next batch."""
MISMATCH_KL_K1: Final = "dressage_mismatch_kl_k1"
"""Gauge: k1 estimate of KL(rollout || train) over the step's trained tokens."""
MISMATCH_KL_K3: Final = "dressage_mismatch_kl_k3"
"""Gauge: k3 estimate (`exp(d) - 1 - d`, d = train - rollout logprob) of the same KL."""
OFF_POLICY_CLIPPED_FRACTION: Final = "dressage_off_policy_clipped_fraction"
"""Gauge: trained tokens whose importance weight the correction clipped."""
OFF_POLICY_MASKED_FRACTION: Final = "dressage_off_policy_masked_fraction"
"""Gauge: trained tokens the correction masked out of the loss."""
IS_ESS_FRACTION: Final = "dressage_is_ess_fraction"
"""Gauge: effective sample size of the importance weights over trained tokens, as a fraction."""

# --- Proxy.
PROXY_REQUESTS: Final = "dressage_proxy_requests_total"
"""Counter labelled by `endpoint` and `code`."""
PROXY_REQUEST_DURATION: Final = "dressage_proxy_request_duration_seconds"
PROXY_PREEMPTS: Final = "dressage_proxy_preempts_total"
PROXY_REFUSALS: Final = "dressage_proxy_refusals_total"
"""Counter labelled by `reason` (for example `partial_rollout_staleness_exceeded`)."""
PROXY_ACTIVE_SESSIONS: Final = "dressage_proxy_active_sessions"
PROXY_VERSION_SPAN: Final = "dressage_proxy_version_span"
"""Histogram of finished segments' version spans."""
PROXY_ENGINE_HEALTHY: Final = "dressage_proxy_engine_healthy"
"""Gauge labelled by `engine`: 1 when the engine answers its health check."""
PROXY_ENGINE_RETRIES: Final = "dressage_proxy_engine_retries_total"
"""Counter: generations resent to another engine after theirs failed before answering."""
PROXY_ENGINE_BUSY: Final = "dressage_proxy_engine_busy_total"
"""Counter labelled by `engine`: `/generate` answers HTTP 503 (SGLang: "The request queue is
full.") after which the proxy backed off or tried another engine, the engine staying routable."""
PROXY_EXPIRED_SESSIONS: Final = "dressage_proxy_expired_sessions_total"
PROXY_INFLIGHT: Final = "dressage_proxy_inflight_requests"
"""Gauge: generations in flight through the proxy."""
PROXY_GENERATION_OVERHEAD: Final = "dressage_proxy_generation_overhead_seconds"
"""Histogram: a model turn's time in the proxy minus the time its engines report for it
(`meta_info.e2e_latency`): the proxy's own work and queueing, plus the network and the
engine's HTTP intake, which the engine's figure leaves out."""

# --- Operator, per job (labels `namespace`, `job`).
JOB_STALENESS_VERSION_SPAN_MEAN: Final = "dressage_job_staleness_version_span_mean"
JOB_STALENESS_VERSION_SPAN_MAX: Final = "dressage_job_staleness_version_span_max"
JOB_STALENESS_VERSION_SPAN_MIN: Final = "dressage_job_staleness_version_span_min"
JOB_DROPPED_GROUPS: Final = "dressage_job_dropped_groups_total"
JOB_STALENESS_FAILURES: Final = "dressage_job_staleness_failures_total"
JOB_TRAIN_STEP: Final = "dressage_job_train_step"
JOB_WEIGHT_VERSION: Final = "dressage_job_weight_version"
JOB_PHASE: Final = "dressage_job_phase"
"""Gauge labelled by `phase`: 1 for the job's current phase, 0 otherwise."""
JOB_RESTARTS: Final = "dressage_job_restarts_total"
JOB_MAX_VERSION_SPAN_LIMIT: Final = "dressage_job_staleness_max_version_span"
"""Gauge: the job's version span limit, `maxPartialRolloutPreempts + 1`; absent when unset."""
JOB_ENGINES: Final = "dressage_job_engines"
"""Gauge labelled by `state`: the engines the job asks for (`desired`) and those ready."""
JOB_ENGINE_SCALE_EVENTS: Final = "dressage_job_engine_scale_events_total"
"""Counter labelled by `direction` (`up`, `down`): the autoscaler's changes of the engine
count."""
JOB_AUTOSCALER_DESIRED_ENGINES: Final = "dressage_job_autoscaler_desired_engines"
"""Gauge: the engine count of the autoscaler's last decision."""
JOB_TRAINER_WAIT_FRACTION: Final = "dressage_job_trainer_wait_fraction"
"""Gauge: the autoscaler's scale-up signal, the fraction of the trainer's step time spent
waiting for batches over its last interval."""
JOB_ADMISSION_HELD_FRACTION: Final = "dressage_job_admission_held_fraction"
"""Gauge: the autoscaler's scale-down signal, the fraction of the same time admission control
held rollout back."""

# --- Operator health.
OPERATOR_RECONCILE: Final = "dressage_operator_reconcile_total"
"""Counter labelled by `result` (`ok`, `error`, `retry`)."""
OPERATOR_RECONCILE_ERRORS: Final = "dressage_operator_reconcile_errors_total"
OPERATOR_RECONCILE_DURATION: Final = "dressage_operator_reconcile_duration_seconds"


def all_names() -> frozenset[str]:
    """Every metric name this module declares."""
    return frozenset(
        value
        for key, value in globals().items()
        if key.isupper() and isinstance(value, str) and value.startswith("dressage_")
    )
