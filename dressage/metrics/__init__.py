"""Prometheus metric names exported by Dressage.

This module is the one list of names: the runtime, the proxy and the operator export them, the
Grafana dashboard and the alert rules query them, and a test keeps those in step. The names of
a step's figures are not written here: they are derived from their declaration
(`dressage.api.figures.StepFigures`, `Figure.metric` and `Figure.job_metric`), and the constants
below name the ones the dashboard's panels, the alert rules and the tests pick out. Prometheus
names cannot contain `/`, so the design's `staleness/version_span_mean` is exported as
`dressage_staleness_version_span_mean`; counters end in `_total`.
"""

from __future__ import annotations

from typing import Final

from dressage.api.figures import StepFigures, figure, figures_of, status_figures

JOB_LABEL: Final = "dressage_job"
"""The label naming the AsyncRLJob on every per-job series, with `namespace`: the operator's
per-job series carry it, and the chart's PodMonitor copies the pods' `dressage.io/job` label
into it. Prometheus' own `job` label (the scrape job) is left as Prometheus sets it."""

# --- Job runtime (trainer + collector), exported by `dressage run` and the trainer pods: the
# step's figures, named by their declaration.
STALENESS_VERSION_SPAN_MEAN: Final = figure("version_span_mean").metric
STALENESS_VERSION_SPAN_MAX: Final = figure("version_span_max").metric
STALENESS_VERSION_SPAN_MIN: Final = figure("version_span_min").metric
STALENESS_VERSION_LAG_MEAN: Final = figure("version_lag_mean").metric
STALENESS_VERSION_LAG_MAX: Final = figure("version_lag_max").metric
STALENESS_VERSION_LAG_TOKEN_MEAN: Final = figure("version_lag_token_mean").metric
STALENESS_VERSION_LAG_UNKNOWN_SAMPLES: Final = figure("version_lag_unknown_samples").metric
STALENESS_ADMISSION_LAG_MEAN: Final = figure("admission_lag_mean").metric
STALENESS_ADMISSION_LAG_MAX: Final = figure("admission_lag_max").metric
TRAIN_ROLLOUT_LOGPROB_ABS_DIFF: Final = figure("train_rollout_logprob_abs_diff").metric
REWARD_MEAN: Final = figure("reward").metric
ENTROPY: Final = figure("entropy").metric
CLIP_FRACTION: Final = figure("clip_fraction").metric
DROPPED_GROUPS: Final = figure("dropped_groups").metric
"""Counter labelled by `reason` (for example `stale_version`, `retries_exhausted`)."""
STALENESS_FAILURES: Final = figure("staleness_failures").metric
ROLLOUT_RETRIES: Final = figure("retries").metric
ROLLOUT_GROUPS_COMPLETED: Final = figure("groups").metric
TRAINED_SAMPLES: Final = figure("samples").metric
TRAINED_DRAINED_TOKENS: Final = figure("drained_tokens").metric
"""Counter: trained tokens a drained engine generated, against `PROXY_DRAINED_TOKENS` moved."""
ROLLOUT_FAILED_ATTEMPTS: Final = figure("failed_attempts").metric
"""Counter labelled by `reason`: failed prompt-group attempts (each retry counts one)."""
ROLLOUT_FAILED_GROUPS: Final = figure("failed_groups").metric
"""Counter labelled by `reason`: prompt groups with a failed attempt (each once per reason)."""
REWARD_FAILED_SAMPLES: Final = figure("reward_failed_samples").metric
"""Counter labelled by `reason`: trained samples whose reward call failed (trained with 0)."""
REWARD_PART: Final = figure("reward_parts").metric
"""Gauge labelled by `part`: each named reward part's mean over the latest trained batch."""
DATASET_BAD_ROWS: Final = "dressage_dataset_bad_rows"
"""Gauge labelled by `reason`: rows of the job's dataset skipped as unusable, set once when the
task is built (`missing_column`, `not_json`, ...)."""
ROLLOUT_ADMISSIONS_HELD: Final = figure("admissions_held").metric
ROLLOUT_ADMISSION_WAIT_SECONDS: Final = figure("admission_wait_seconds").metric
MISMATCH_KL_K1: Final = figure("mismatch_kl_k1").metric
MISMATCH_KL_K3: Final = figure("mismatch_kl_k3").metric
OFF_POLICY_CLIPPED_FRACTION: Final = figure("off_policy_clipped_fraction").metric
OFF_POLICY_MASKED_FRACTION: Final = figure("off_policy_masked_fraction").metric
IS_ESS_FRACTION: Final = figure("is_ess_fraction").metric
# ... and what the training loop reports besides the step's figures.
TRAIN_STEP: Final = "dressage_train_step"
WEIGHT_VERSION: Final = "dressage_weight_version"
"""Gauge: ordinal of the latest published weight version (its label is in `_info`)."""
WEIGHT_VERSION_INFO: Final = "dressage_weight_version_info"
ROUTING_AGREEMENT: Final = figure("routing_agreement").metric
ROUTED_TOKEN_FRACTION: Final = figure("routed_token_fraction").metric
TRAINER_STEP_SECONDS: Final = figure("step_seconds").metric
"""Counter: wall seconds of the trainer's completed steps (waiting for the batch, training,
publishing); the engines' autoscaler divides the counter below and the admission wait by it."""
TRAINER_BATCH_WAIT_SECONDS: Final = figure("rollout_seconds").metric
"""Counter: of those, the seconds trainer rank 0 waited for its next batch."""
TRAINER_TRAIN_SECONDS: Final = figure("train_seconds").metric
TRAINER_PUBLISH_SECONDS: Final = figure("publish_seconds").metric
"""Counter: of those, the seconds publishing the new weights to the engines (weight sync)."""
TRAINER_BATCH_WAIT_FRACTION: Final = figure("batch_wait_fraction").metric
"""Gauge: the latest step's batch wait over its wall seconds; over a window, the rate of
`TRAINER_BATCH_WAIT_SECONDS` over that of `TRAINER_STEP_SECONDS`."""
TRAIN_LOSS: Final = figure("loss").metric
TRAIN_GRAD_NORM: Final = figure("grad_norm").metric
TRAINED_TOKENS: Final = figure("trained_tokens").metric
GENERATED_TOKENS: Final = figure("generated_tokens").metric
"""Counter: engine tokens of the completed prompt groups, trained or dropped."""
TRAINED_TOKENS_PER_SECOND: Final = figure("trained_tokens_per_second").metric
GENERATED_TOKENS_PER_TRAINED_TOKEN: Final = figure("generated_tokens_per_trained_token").metric
"""Gauge: the latest step's waste; over a window, the rate of `GENERATED_TOKENS` over that of
`TRAINED_TOKENS`."""
# ... and the held-out evaluations (`spec.evaluation`), each labelled by `version`; only the
# latest few evaluated versions and the best one are exported at any time.
EVAL_PASS_AT_K: Final = "dressage_eval_pass_at_k"
"""Gauge labelled by `version` and `k`: held-out pass@k of that weight version (`k="1"` is the
headline figure)."""
EVAL_REWARD_MEAN: Final = "dressage_eval_reward_mean"
"""Gauge labelled by `version`: the version's mean held-out reward."""
EVAL_STEP: Final = "dressage_eval_step"
"""Gauge labelled by `version`: the training step whose publish made the version (0 for
`v0`)."""
EVAL_PROMPTS: Final = "dressage_eval_prompts"
"""Gauge labelled by `version`: the held-out prompts the version was evaluated on."""
EVAL_RUNS: Final = "dressage_eval_runs_total"
"""Counter: evaluations run."""
EVAL_EXPORTED_VERSIONS: Final = 4
"""How many of the latest evaluated versions stay exported (besides the best, with the
trainer's `dressage.orchestrator.metrics`)."""

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
PROXY_ENGINES: Final = "dressage_proxy_engines"
"""Gauge labelled by `state` (`healthy`, `unhealthy`): the engines of the proxy's pool, counted
whatever the fleet's size (the per-engine series above are kept to small fleets)."""
PROXY_ENGINE_RETRIES: Final = "dressage_proxy_engine_retries_total"
"""Counter: generations resent to another engine after theirs failed before answering."""
PROXY_ENGINE_BUSY: Final = "dressage_proxy_engine_busy_total"
"""Counter labelled by `engine`: `/generate` answers HTTP 503 (SGLang: "The request queue is
full.") after which the proxy backed off or tried another engine, the engine staying routable."""
PROXY_DRAINED_TURNS: Final = "dressage_proxy_drained_turns_total"
"""Counter: pieces of turns a draining engine aborted, each continued on another engine."""
PROXY_DRAINED_TOKENS: Final = "dressage_proxy_drained_tokens_total"
"""Counter: tokens of those pieces kept in their turns (partial rollout), which the trained
samples count in `Sample.metadata["drained_tokens"]`."""
PROXY_DRAINED_TOKENS_LOST: Final = "dressage_proxy_drained_tokens_lost_total"
"""Counter labelled by `reason`: of those, the tokens whose turn then failed (the group is
retried), by the failure's error name."""
PROXY_LOST_TOKENS: Final = "dressage_proxy_lost_tokens_total"
"""Counter labelled by `reason` and `evaluation` ("true"/"false"): tokens the engines returned
that no sample will hold (a turn refused, failed or cancelled: the failure's name; a preempted
turn generated again without partial rollout: `restarted`), the token ledger's proxy side."""
PROXY_ENGINE_FAILED_TURNS: Final = "dressage_proxy_engine_failed_turns_total"
"""Counter labelled by `reason` (`connect_failed`, `connection_lost`, `connection_lost_mid_turn`,
`reply_timeout`): turns an engine's failure hit (`dressage.proxy.drain`)."""
PROXY_EXPIRED_SESSIONS: Final = "dressage_proxy_expired_sessions_total"
PROXY_EVICTED_SESSIONS: Final = "dressage_proxy_evicted_sessions_total"
"""Counter: idle sessions dropped to make room for a new one at the proxy's `max_sessions`."""
PROXY_INFLIGHT: Final = "dressage_proxy_inflight_requests"
"""Gauge: generations in flight through the proxy."""
PROXY_GENERATION_OVERHEAD: Final = "dressage_proxy_generation_overhead_seconds"
"""Histogram: a model turn's time in the proxy minus the time its engines report for it
(`meta_info.e2e_latency`): the proxy's own work and queueing, plus the network and the
engine's HTTP intake, which the engine's figure leaves out."""

# --- Operator, per job (labels `namespace`, `dressage_job`): the status figures under their
# `Figure.job_metric`, and the job's own state.
JOB_STALENESS_VERSION_SPAN_MEAN: Final = figure("version_span_mean").job_metric
JOB_STALENESS_VERSION_SPAN_MAX: Final = figure("version_span_max").job_metric
JOB_STALENESS_VERSION_SPAN_MIN: Final = figure("version_span_min").job_metric
JOB_STALENESS_VERSION_LAG_MEAN: Final = figure("version_lag_mean").job_metric
JOB_STALENESS_VERSION_LAG_MAX: Final = figure("version_lag_max").job_metric
JOB_STALENESS_VERSION_LAG_TOKEN_MEAN: Final = figure("version_lag_token_mean").job_metric
JOB_DROPPED_GROUPS: Final = figure("dropped_groups").job_metric
JOB_STALENESS_FAILURES: Final = figure("staleness_failures").job_metric
JOB_TRAIN_STEP: Final = "dressage_job_train_step"
JOB_WEIGHT_VERSION: Final = "dressage_job_weight_version"
JOB_PHASE: Final = "dressage_job_phase"
"""Gauge labelled by `phase`: 1 for the job's current phase, 0 otherwise."""
JOB_ROLLOUT_MODE: Final = "dressage_job_rollout_mode"
"""Gauge labelled by `mode`: 1 for the job's `spec.rollout.mode` (`sync`, `fully_async`,
`partial_async`); the alert on a trainer waiting for batches leaves `sync` jobs out, whose
trainer waits for every rollout by design."""
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
JOB_EVAL_LATEST_PASS_AT_1: Final = "dressage_job_eval_latest_pass_at_1"
"""Gauge: held-out pass@1 of the job's latest evaluated version (`status.evaluation.latest`)."""
JOB_EVAL_BEST_PASS_AT_1: Final = "dressage_job_eval_best_pass_at_1"
"""Gauge: the best held-out pass@1 the job reached (`status.evaluation.best`), kept by the
operator when the job no longer exports that version."""
JOB_EVAL_LATEST_STEP: Final = "dressage_job_eval_latest_step"
"""Gauge: the training step of the latest evaluated version."""
JOB_EVAL_BEST_STEP: Final = "dressage_job_eval_best_step"
"""Gauge: the training step of the best evaluated version."""

# --- Operator health.
OPERATOR_RECONCILE: Final = "dressage_operator_reconcile_total"
"""Counter labelled by `result` (`ok`, `error`, `retry`)."""
OPERATOR_RECONCILE_ERRORS: Final = "dressage_operator_reconcile_errors_total"
OPERATOR_RECONCILE_DURATION: Final = "dressage_operator_reconcile_duration_seconds"


def figure_names(declaration: type[StepFigures] = StepFigures) -> frozenset[str]:
    """The names of a figure declaration: each figure's, and each status figure's per job."""
    return frozenset(f.metric for f in figures_of(declaration)) | frozenset(
        f.job_metric for f in status_figures(declaration)
    )


def all_names(declaration: type[StepFigures] = StepFigures) -> frozenset[str]:
    """Every metric name Dressage exports: this module's (`JOB_LABEL` is a label, not one), and
    those of the figures."""
    return figure_names(declaration) | frozenset(
        value
        for key, value in globals().items()
        if key.isupper()
        and key != "JOB_LABEL"
        and isinstance(value, str)
        and value.startswith("dressage_")
    )
