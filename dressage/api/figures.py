"""The figures of one training step: each declared once, with every name derived from it.

`StepFigures` is the declaration and the record at once: one field per figure, its kind, unit
and description given where it is declared (`counter`, `gauge`, `by_reason`). The collector
fills the rollout figures (`dressage.rollout.stats`), the trainer's step its own, the training
loop (`dressage.orchestrator.loop`) its seconds, the version lag and the ratios of counters
(`Figure.ratio`: tokens per second, generated per trained token); every consumer iterates
`figures_of(...)` and never lists a figure by hand:

- the step record, `history.jsonl` and `report.json` write each figure under `key`;
- the job's `/metrics` (`dressage.orchestrator.metrics`) exports it as `metric`;
- the job's status (`dressage.api.status`) shows the figures declared with `status=True`
  under `status_key`, and the operator, which reads them from the job's `/metrics`, exports
  them per job as `job_metric`;
- the step line of `dressage run` shows the figures declared with a `line` label;
- the Grafana dashboard queries every `metric`.

A new counter is one line here, for example
`widgets_refused: int = counter("attempts", "Attempts a widget refused", status=True)`.

Names, one rule for all (`Figure`): the record key is the field name, or
`<namespace>/<name>` (`staleness/version_span_mean`, the design's name in `docs/staleness.md`); the
Prometheus name is `dressage_` plus the key with `/` as `_` (or the figure's own `metric`
stem), counters ending in `_total`; the operator's per-job name is the same with `dressage_job_`;
the status key is the field name in camelCase, and a by-reason figure adds `<name>ByReason`.

Why here, in the job model's package: `dressage.api` is the lowest layer, and the status keys
are part of the CRD generated from it. Every other consumer sits above it (the record travels
in `dressage.data.groups.TrainBatch`, the names in `dressage.metrics`, the operator reads
`dressage.api`), so each reaches the declaration without importing upward.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from dressage.api.figure_model import (
    Figure,
    FigureKind,
    FigureSource,
    by_reason,
    counter,
    gauge,
    read_declaration,
)
from dressage.api.lengths import LENGTH_BUCKETS, length_bucket

__all__ = [
    "LEDGER_ACCOUNTS", "LENGTH_BUCKETS", "Figure", "FigureKind", "FigureSource", "StepFigures",
    "by_reason", "counter", "figure", "figures_of", "gauge", "length_bucket", "line_parts",
    "ratios", "status_figures", "totals", "trainer_keys",
]  # fmt: skip
LEDGER_ACCOUNTS = ("trained", "masked", "dropped", "refused", "aborted", "evaluation", "surplus")
"""The token ledger's accounts (`dressage.rollout.ledger.Account`), exported at 0."""

F = TypeVar("F", bound="StepFigures")


@dataclass
class StepFigures:
    """The figures of one step, as the collector and the trainer filled them.

    Subclass it to add figures (tests do); every consumer takes the declaration it iterates.

    Not declared here: the batch's samples by output version span,
    `staleness/version_span_samples/N` (`dressage.data.samples.version_span_histogram`). It
    has one key per span the batch holds, which `benchmarks/long_tail.py` reads from the
    history key by key, while a figure has one key: one value, or a labelled gauge's values
    per label under that key, and those the latest batch's only, where this distribution is a
    count to add up over steps. So it stays in the step record's extras: in the history, not
    on `/metrics`, the status or the dashboard.
    """

    # --- counted by the collector while it assembled the batch ---------------------------
    dropped_groups: Counter[str] = by_reason(
        "groups",
        "Prompt groups dropped (a staleness verdict such as `stale_version` or "
        "`window_advanced`, `retries_exhausted`, `shutdown`, and under `onRewardError: drop` "
        "`reward_error` or `environment_error`: a failure that is the infrastructure's)",
        status=True,
        line=("drops", "d"),
        reasons=("retries_exhausted", "reward_error", "environment_error"),
    )
    failed_attempts: Counter[str] = by_reason(
        "attempts",
        "Prompt-group attempts that failed, each retry counting one (a group tried 4 times "
        "counts 4); the reason is the proxy's error name, the user code's failure reason "
        "(`reward_raised` under `onRewardError: stop`, `reward_timeout` under `drop`, "
        "`environment_raised`, `agent_failed`) or `rollout_error`",
        metric="rollout_failed_attempts",
    )
    failed_groups: Counter[str] = by_reason(
        "groups",
        "Prompt groups with at least one failed attempt, each group counted once per reason "
        "whether a retry then completed it or it was dropped (`dropped_groups` says which)",
        metric="rollout_failed_groups",
    )
    reward_failed_samples: Counter[str] = by_reason(
        "samples",
        "Samples of the batch whose reward call failed, so they were trained with reward 0 "
        "(`onRewardError: zero`), at most the batch's samples; the reason is "
        "`reward_raised`, `reward_timeout` or `reward_invalid`",
    )
    retries: int = counter("retries", "Prompt-group retries", metric="rollout_retries")
    staleness_failures: int = counter(
        "attempts",
        "Prompt-group attempts a staleness control refused: the proxy's partial-rollout span "
        "limit (502 `partial_rollout_staleness_exceeded`) or, without partial rollout, a "
        "trajectory whose version changed (409 `version_changed_without_partial_rollout`); "
        "one per failed attempt, however many of its trajectories were refused",
        status=True,
    )
    admissions_held: int = counter(
        "groups",
        "Prompt groups whose start admission control held back (each counted once)",
        metric="rollout_admissions_held",
    )
    admission_wait_seconds: float = counter(
        "seconds",
        "Seconds the rollout worker waited for admission control before starting a group",
        metric="rollout_admission_wait_seconds",
        float_valued=True,
    )
    # --- the trainer's step ----------------------------------------------------------------
    reward: float | None = gauge(
        "reward", "Mean reward of the batch's samples", metric="reward_mean"
    )
    reward_parts: dict[str, float] | None = gauge(
        "reward",
        "Mean of each named part of a reward returning a dict, over the batch's samples whose "
        "reward call succeeded (without failures, `reward` is the parts' weighted sum)",
        source=FigureSource.ROLLOUT,
        metric="reward_part",
        label="part",
    )
    train_rollout_logprob_abs_diff: float | None = gauge(
        "nats",
        "Mean |train logprob - rollout logprob| over trained tokens",
        line=("logprob_diff", ".1e"),
    )
    version_span_mean: float | None = gauge(
        "versions",
        "Mean number of weight versions a trajectory of the batch spans (its output tokens)",
        namespace="staleness",
        status=True,
        line=("span", ".2f"),
    )
    version_span_max: float | None = gauge(
        "versions",
        "Largest number of weight versions a trajectory of the batch spans",
        namespace="staleness",
        status=True,
        line=("span_max", "d"),
    )
    version_span_min: float | None = gauge(
        "versions",
        "Smallest number of weight versions a trajectory of the batch spans",
        namespace="staleness",
        status=True,
    )
    version_lag_mean: float | None = gauge(
        "versions",
        "Mean version lag of the batch's samples: the trainer's version at the step minus the "
        "sample's trajectory version, in observed-version order (`dressage.rollout.lag`); "
        "samples of unknown version left out",
        source=FigureSource.LOOP,
        namespace="staleness",
        status=True,
        line=("lag", ".2f"),
    )
    version_lag_max: float | None = gauge(
        "versions",
        "Largest version lag of a sample of the batch",
        source=FigureSource.LOOP,
        namespace="staleness",
        status=True,
        line=("lag_max", "d"),
    )
    version_lag_token_mean: float | None = gauge(
        "versions",
        "Mean version lag of the batch's trainable tokens (each sample's lag weighted by them)",
        source=FigureSource.LOOP,
        namespace="staleness",
        status=True,
    )
    version_lag_unknown_samples: int = counter(
        "samples",
        "Trained samples without a version lag: no real trajectory version, or one the "
        "trainer's version order does not hold",
        source=FigureSource.LOOP,
        metric="staleness_version_lag_unknown_samples",
    )
    admission_lag_mean: float | None = gauge(
        "versions",
        "Mean version lag the groups started since the previous batch will have when trained, "
        "as admission control projects it at their start (`AdmissionPolicy.projected_lag`)",
        source=FigureSource.ROLLOUT,
        namespace="staleness",
    )
    admission_lag_max: float | None = gauge(
        "versions",
        "Largest projected version lag of a group started since the previous batch; with "
        "admission control on it stays below `keepVersions`",
        source=FigureSource.ROLLOUT,
        namespace="staleness",
    )
    # --- the staleness budget (`spec.staleness.mode: auto`, `dressage.rollout.budget`) ----
    budget_concurrency: float | None = gauge(
        "groups",
        "Prompt groups in flight the staleness budget's controller chose after the step (the "
        "rollout concurrency from the next group started on, at most `rollout.concurrency`); "
        "`staleness.mode: auto` only",
        source=FigureSource.LOOP,
        namespace="staleness",
        status=True,
        line=("depth", "d"),
    )
    budget_keep_versions: float | None = gauge(
        "versions",
        "The batch-level window (`keepVersions`) the staleness budget's controller chose after "
        "the step, at most `maxLagVersions + 1`",
        source=FigureSource.LOOP,
        namespace="staleness",
        status=True,
        line=("keep", "d"),
    )
    budget_max_lag: float | None = gauge(
        "versions",
        "The budget's `maxLagVersions`: the bound `version_lag_max` is held to",
        source=FigureSource.LOOP,
        namespace="staleness",
        status=True,
    )
    budget_max_mismatch_kl: float | None = gauge(
        "nats",
        "The budget's `maxMismatchKL`: the ceiling `mismatch_kl_k3` is held to (unset: none)",
        source=FigureSource.LOOP,
        namespace="staleness",
    )
    budget_exceeded_steps: int = counter(
        "steps",
        "Steps whose trained batch exceeded the staleness budget: a sample's version lag above "
        "`maxLagVersions`, or the mismatch KL (k3) above `maxMismatchKL`",
        source=FigureSource.LOOP,
        metric="staleness_budget_exceeded_steps",
    )
    budget_changes: int = counter(
        "changes",
        "Steps after which the staleness budget's controller changed the depth or the window",
        source=FigureSource.LOOP,
        metric="staleness_budget_changes",
    )
    budget_engine_ratio: float | None = gauge(
        "ratio",
        "Engines the staleness budget's controller wants over the engines serving: above 1 the "
        "trainer waits for data while the depth is at its bound (more engines would feed it "
        "within the budget), below 1 the budget holds rollout back most of the time; the "
        "operator's autoscaler sizes the fleet from it in `staleness.mode: auto`",
        source=FigureSource.LOOP,
        namespace="staleness",
        status=True,
    )
    entropy: float | None = gauge(
        "nats", "Mean policy entropy over trained tokens", line=("entropy", ".3f")
    )
    clip_fraction: float | None = gauge(
        "fraction", "Fraction of trained tokens with a clipped ratio", line=("clip", ".3f")
    )
    mismatch_kl_k1: float | None = gauge(
        "nats", "k1 estimate of KL(rollout || train) over the step's trained tokens"
    )
    mismatch_kl_k3: float | None = gauge(
        "nats",
        "k3 estimate (`exp(d) - 1 - d`, d = train - rollout logprob) of KL(rollout || train)",
    )
    off_policy_clipped_fraction: float | None = gauge(
        "fraction", "Fraction of trained tokens whose importance weight the correction clipped"
    )
    off_policy_masked_fraction: float | None = gauge(
        "fraction", "Fraction of trained tokens the off-policy correction masked out of the loss"
    )
    is_ess_fraction: float | None = gauge(
        "fraction",
        "Effective sample size of the importance weights, as a fraction of trained tokens",
    )
    routing_agreement: float | None = gauge(
        "fraction",
        "Share of the (token, MoE layer) pairs the rollout routed whose top-k expert set the "
        "trainer's own router picks too (MoE, `spec.rollout.routingReplay` record or replay)",
    )
    routed_token_fraction: float | None = gauge(
        "fraction",
        "Share of the trained samples' tokens that carried the rollout's routed experts (MoE, "
        "routing replay on)",
    )
    groups: int = counter(
        "groups",
        "Prompt groups completed and trained on",
        source=FigureSource.TRAINER,
        metric="rollout_groups_completed",
    )
    samples: int = counter(
        "samples", "Samples trained on", source=FigureSource.TRAINER, metric="trained_samples"
    )
    drained_tokens: int = counter(
        "tokens",
        "Trained response tokens generated on an engine that a drain then took their turn from "
        "(partial rollout continued the turn on another engine); over a run they add up to the "
        "proxy's `dressage_proxy_drained_tokens_total` unless a group holding them was dropped "
        "or is not trained yet",
        source=FigureSource.TRAINER,
        metric="trained_drained_tokens",
        status=True,
        line=("drained_tokens", "d"),
    )
    drained_samples: int = counter(
        "samples",
        "Trained samples holding drained tokens (`drained_tokens`)",
        source=FigureSource.TRAINER,
        metric="trained_drained_samples",
    )
    # --- the step's tokens and time (the time measured by the training loop) -------------
    trained_tokens: int = counter(
        "tokens",
        "Response tokens trained on: the samples' trainable tokens (loss mask 1) after the "
        "trainer's own masking",
        source=FigureSource.TRAINER,
    )
    generated_tokens: int = counter(
        "tokens",
        "Response tokens the engines generated (loss mask 1) in the prompt groups completed "
        "since the previous batch, whether trained or dropped after (a staleness verdict); "
        "attempts that failed before completing their group are not counted",
    )
    ledger_tokens: Counter[str] = by_reason(
        "tokens",
        "The token ledger (`dressage.rollout.ledger`): generated response tokens, each in one "
        "account: `trained`, `masked.<reason>` (in a trained sample, out of the loss), "
        "`dropped.<verdict>`, `refused.<reason>` (a span-limit refusal, "
        "the group generated again), `aborted.<reason>` (another failed attempt), "
        "`evaluation`, `surplus.<where>` (pending or queued when the run stopped)",
        status=True,
        reasons=("trained",),
    )
    # --- length bias: what was generated against what was trained (`dressage.rollout.stats`)
    generated_samples: int = counter(
        "samples",
        "Samples of the prompt groups completed since the previous batch, whether trained or "
        "dropped after (a staleness verdict): the samples `generated_tokens` counts the tokens of",
    )
    generated_samples_by_length: Counter[str] = by_reason(
        "samples",
        "Samples of the completed prompt groups (`generated_samples`) by response length, the "
        "reason being the length bucket (`le16`, `le64`, `le256`, `gt256` tokens)",
        reasons=LENGTH_BUCKETS,
    )
    dropped_samples_by_length: Counter[str] = by_reason(
        "samples",
        "Samples of completed prompt groups that a staleness verdict then dropped at the batch "
        "sink, by response length bucket as `generated_samples_by_length`: a drop rate that "
        "grows with the bucket is a bias against long responses",
        reasons=LENGTH_BUCKETS,
    )
    generated_mean_tokens: float | None = gauge(
        "tokens",
        "Mean response length of the samples generated since the previous batch "
        "(`generated_tokens` / `generated_samples`)",
        source=FigureSource.LOOP,
        namespace="length",
        ratio=("generated_tokens", "generated_samples"),
        line=("len_gen", ".1f"),
    )
    trained_mean_tokens: float | None = gauge(
        "tokens",
        "Mean response length of the samples trained (`trained_tokens` / `samples`); below "
        "`generated_mean_tokens` when drops or refusals keep long responses out of training",
        source=FigureSource.LOOP,
        namespace="length",
        ratio=("trained_tokens", "samples"),
        line=("len", ".1f"),
    )
    step_seconds: float = counter(
        "seconds",
        "Wall seconds of the trainer's steps: waiting for the batch, training, publishing",
        source=FigureSource.LOOP,
        metric="trainer_step_seconds",
        float_valued=True,
    )
    rollout_seconds: float = counter(
        "seconds",
        "Of the step's seconds, those trainer rank 0 waited for its batch",
        source=FigureSource.LOOP,
        metric="trainer_batch_wait_seconds",
        float_valued=True,
    )
    train_seconds: float = counter(
        "seconds",
        "Of the step's seconds, those the optimizer step and its checkpoint's commit took",
        source=FigureSource.LOOP,
        metric="trainer_train_seconds",
        float_valued=True,
    )
    publish_seconds: float = counter(
        "seconds",
        "Of the step's seconds, those publishing its weights to the engines (weight sync)",
        source=FigureSource.LOOP,
        metric="trainer_publish_seconds",
        float_valued=True,
    )
    loss: float | None = gauge("loss", "The step's policy loss", metric="train_loss")
    grad_norm: float | None = gauge(
        "norm", "Gradient norm of the step, before clipping", metric="train_grad_norm"
    )
    trained_tokens_per_second: float | None = gauge(
        "tokens per second",
        "Trained tokens per wall second of the step (`trained_tokens` / `step_seconds`)",
        source=FigureSource.LOOP,
        ratio=("trained_tokens", "step_seconds"),
        line=("tok/s", ".0f"),
    )
    generated_tokens_per_trained_token: float | None = gauge(
        "tokens per token",
        "Engine tokens generated per token trained (`generated_tokens` / `trained_tokens`): "
        "1 when every generated token is trained, above it by what drops and masking waste",
        source=FigureSource.LOOP,
        ratio=("generated_tokens", "trained_tokens"),
    )
    batch_wait_fraction: float | None = gauge(
        "fraction",
        "Fraction of the step the trainer waited for its batch (`rollout_seconds` / "
        "`step_seconds`): near 1, the trainer is starved of batches",
        metric="trainer_batch_wait_fraction",
        source=FigureSource.LOOP,
        ratio=("rollout_seconds", "step_seconds"),
        line=("wait", ".2f"),
    )

    def since(self: F, before: StepFigures) -> F:
        """What was counted since `before` (an earlier copy of the same running totals);
        gauges are this record's own."""
        values: dict[str, Any] = {}
        for f in figures_of(type(self)):
            now, then = getattr(self, f.name), getattr(before, f.name)
            if f.kind is FigureKind.BY_REASON:
                values[f.name] = Counter(now) - Counter(then)
            elif f.kind is FigureKind.COUNTER:
                values[f.name] = now - then
        return dataclasses.replace(self, **values)

    def plus(self: F, other: StepFigures) -> F:
        """This record with `other`'s counted figures added (per reason for a by-reason
        one); gauges are this record's own."""
        values: dict[str, Any] = {}
        for f in figures_of(type(self)):
            now, more = getattr(self, f.name), getattr(other, f.name)
            if f.kind is FigureKind.BY_REASON:
                values[f.name] = Counter(now) + Counter(more)
            elif f.kind is FigureKind.COUNTER:
                values[f.name] = now + more
        return dataclasses.replace(self, **values)

    def copy(self: F) -> F:
        """An independent copy (the counts per reason are copied too)."""
        counts: dict[str, Any] = {
            f.name: Counter(getattr(self, f.name))
            for f in figures_of(type(self))
            if f.kind is FigureKind.BY_REASON
        }
        counts.update(
            {
                f.name: dict(value)
                for f in figures_of(type(self))
                if f.label is not None and (value := getattr(self, f.name)) is not None
            }
        )
        return dataclasses.replace(self, **counts)

    def with_trainer_figures(self: F, values: Mapping[str, float]) -> F:
        """This record with the trainer's and the training loop's figures taken from `values`
        (keyed by `key`; a figure the step did not report keeps its value)."""
        taken = {
            f.name: f.value_type(values[f.key])
            for f in figures_of(type(self))
            if f.source in (FigureSource.TRAINER, FigureSource.LOOP) and f.key in values
        }
        return dataclasses.replace(self, **taken)

    def timed(self: F, rollout_seconds: float, train_seconds: float, publish_seconds: float) -> F:
        """This record with the step's seconds (its batch wait, training and publish, and
        their sum) and its ratios (`with_ratios`) taken from them."""
        return dataclasses.replace(
            self,
            step_seconds=rollout_seconds + train_seconds + publish_seconds,
            rollout_seconds=rollout_seconds,
            train_seconds=train_seconds,
            publish_seconds=publish_seconds,
        ).with_ratios()

    def with_ratios(self: F) -> F:
        """This record with every ratio figure computed from its own counters (None where
        the denominator is 0)."""
        declared = figures_of(type(self))
        counts = {f.name: getattr(self, f.name) for f in declared if f.kind is FigureKind.COUNTER}
        values: dict[str, Any] = {
            f.name: f.ratio_of(counts) for f in declared if f.ratio is not None
        }
        return dataclasses.replace(self, **values)

    def record(self) -> dict[str, Any]:
        """Every figure under its `key`, as the step record writes it (unmeasured gauges
        left out)."""
        return {
            f.key: f.record_value(value)
            for f in figures_of(type(self))
            if (value := getattr(self, f.name)) is not None
        }

    def total(self, name: str) -> float:
        """A counted figure's value, summed over its reasons for a by-reason one."""
        value = getattr(self, name)
        return float(sum(value.values()) if isinstance(value, Mapping) else value)


_DECLARED: dict[type[StepFigures], tuple[Figure, ...]] = {}
"""`figures_of`'s answers: a declaration is read once."""


def figures_of(declaration: type[StepFigures] = StepFigures) -> tuple[Figure, ...]:
    """The figures `declaration` declares, in declaration order."""
    known = _DECLARED.get(declaration)
    if known is None:
        known = _DECLARED[declaration] = read_declaration(declaration)
    return known


def figure(name: str, declaration: type[StepFigures] = StepFigures) -> Figure:
    """The declared figure called `name`."""
    for f in figures_of(declaration):
        if f.name == name:
            return f
    raise KeyError(f"no figure {name!r} in {declaration.__name__}")


def status_figures(declaration: type[StepFigures] = StepFigures) -> tuple[Figure, ...]:
    """The figures shown in the job's status and exported per job by the operator."""
    return tuple(f for f in figures_of(declaration) if f.status)


def trainer_keys(declaration: type[StepFigures] = StepFigures) -> frozenset[str]:
    """The keys of the figures the trainer's step fills."""
    return frozenset(f.key for f in figures_of(declaration) if f.source is FigureSource.TRAINER)


def totals(
    records: Iterable[Mapping[str, Any]], declaration: type[StepFigures] = StepFigures
) -> dict[str, Any]:
    """Every counted figure summed over step records (as `StepFigures.record` wrote them),
    by reason for a by-reason figure; a figure no record has counts 0."""
    sums: dict[str, Any] = {}
    counted = [f for f in figures_of(declaration) if f.counted]
    for f in counted:
        sums[f.key] = Counter() if f.kind is FigureKind.BY_REASON else f.value_type(0)
    for record in records:
        for f in counted:
            if f.key not in record:
                continue
            if f.kind is FigureKind.BY_REASON:
                sums[f.key].update({k: int(v) for k, v in dict(record[f.key]).items()})
            else:
                sums[f.key] += f.value_type(record[f.key])
    return {f.key: f.record_value(sums[f.key]) for f in counted}


def ratios(
    sums: Mapping[str, Any], declaration: type[StepFigures] = StepFigures
) -> dict[str, float | None]:
    """Every ratio figure over a run, from its counters' sums (`totals`' answer): the run's
    trained tokens per second, not the mean of its steps'."""
    return {f.key: f.ratio_of(sums) for f in figures_of(declaration) if f.ratio is not None}


def line_parts(figures: StepFigures) -> list[str]:
    """`label value` for every figure the declaration gives a step-line label (`line`), in
    declaration order, `-` for a figure the step did not measure: what both `dressage run`'s
    and `dressage train`'s step lines show after the step, its reward and version."""
    parts = []
    for f in figures_of(type(figures)):
        if f.line is None:
            continue
        label, spec = f.line
        value: float | None = figures.total(f.name) if f.counted else getattr(figures, f.name)
        if value is not None and spec.endswith("d"):
            value = int(value)
        parts.append(f"{label} {'-' if value is None else format(value, spec)}")
    return parts
