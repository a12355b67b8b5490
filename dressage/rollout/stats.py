"""Running totals of a collector, and the per-batch figures the trainer's step record gets.

Every prompt group a collector starts ends in exactly one place: trained, or dropped under a
reason (a staleness verdict, exhausted retries, shutdown). Failed attempts are counted by
reason too (each retry one), the groups they belong to once per reason, and the attempts a
staleness control refused (the proxy's refusals whose type is a staleness refusal) separately.
The counts are the rollout figures of the step declaration
(`dressage.api.figures.StepFigures`): `totals` holds them since the collector started, and a
batch carries what was counted since the previous one.

What the reward said of the batch is taken from the batch itself, from each sample's metadata
(`dressage.tasks.base.Scored.metadata`): the mean of each named reward part over the samples
that have it, and the samples whose reward call failed, by reason. So a step's figures describe
the samples it trained, never the reward calls of groups still in flight or dropped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from dressage.api.figures import StepFigures, length_bucket
from dressage.data.groups import Group, TrainBatch
from dressage.data.samples import Sample
from dressage.rollout import ledger
from dressage.rollout.ledger import Account
from dressage.rollout.span_policy import OLD_VERSION, mask_old_tokens
from dressage.tasks.base import REWARD_FAILURE, REWARD_PARTS


@dataclass
class CollectorStats:
    """Running totals of one collector; the orchestrator exports them as Prometheus counters.

    Invariant once closed: `groups_started == groups_trained + sum(totals.dropped_groups)`.
    """

    groups_started: int = 0
    groups_completed: int = 0
    groups_trained: int = 0
    totals: StepFigures = field(default_factory=StepFigures)
    """The rollout figures counted since the collector started (drops and failures by reason,
    retries, staleness failures, admission)."""
    admission_lags: list[int] = field(default_factory=list)
    """The projected version lag of each group started since the previous batch
    (`AdmissionPolicy.projected_lag`), which the next batch reports and clears."""

    @property
    def groups_dropped(self) -> int:
        return sum(self.totals.dropped_groups.values())

    @property
    def staleness_failure_rate(self) -> float:
        """Staleness failures per started prompt group (0 before any group started)."""
        failures = self.totals.staleness_failures
        return failures / self.groups_started if self.groups_started else 0.0

    def completed(self, group: Group) -> None:
        """Count a prompt group whose rollout completed, and the tokens its engines generated
        for it (`generated_tokens`), before anything decides whether it is trained; the
        trajectories it ran again once it completed (`Group.replaced`) go to the token
        ledger's `dropped.refreshed`."""
        self.groups_completed += 1
        ledger.count(
            self.totals.ledger_tokens,
            Account.DROPPED,
            ledger.sample_tokens(group.replaced),
            ledger.REFRESHED,
        )
        self.totals.generated_tokens += sum(sum(s.loss_mask) for s in group.samples)
        self.totals.generated_samples += len(group.samples)
        self.totals.generated_samples_by_length.update(response_length_buckets(group))

    def dropped_at_sink(self, group: Group, reason: str) -> None:
        """Count a completed prompt group a staleness verdict dropped at the batch sink, and
        its samples by response length (`dropped_samples_by_length`)."""
        self.totals.dropped_groups[reason] += 1
        self.totals.dropped_samples_by_length.update(response_length_buckets(group))
        ledger.count(self.totals.ledger_tokens, Account.DROPPED, ledger.group_tokens(group), reason)

    def failed_attempt(self, tokens: int, reason: str, *, staleness: bool) -> None:
        """Count in the token ledger the `tokens` of a failed attempt (what its trajectories
        generated that reached the agent): `refused` when a staleness control refused it (its
        group is generated again), `aborted` otherwise."""
        account = Account.REFUSED if staleness else Account.ABORTED
        ledger.count(self.totals.ledger_tokens, account, tokens, reason)

    def masked(self, group: Group, keep: int) -> Group:
        """`group` with the tokens older than its trajectories' newest `keep` versions out of
        the loss (`mask_old_tokens`), counted in the token ledger as `masked.old_version`."""
        group, tokens = mask_old_tokens(group, keep)
        ledger.count(self.totals.ledger_tokens, Account.MASKED, tokens, OLD_VERSION)
        return group

    def left_over(self, group: Group, where: str) -> None:
        """Count in the token ledger a completed group the run stopped with, neither trained
        nor dropped (`where`: `pending` in the candidate batch, `queued` behind it) as
        `surplus`; or, when the breaker abandoned it (`where` is `rollout_broken`), as
        `aborted`."""
        account = Account.ABORTED if where == "rollout_broken" else Account.SURPLUS
        ledger.count(self.totals.ledger_tokens, account, ledger.group_tokens(group), where)

    def snapshot(self) -> CollectorStats:
        return replace(self, totals=self.totals.copy())

    def batch(self, groups: Sequence[Group], since: CollectorStats) -> TrainBatch:
        """`groups` as a batch carrying what was counted since the snapshot `since`, the
        reward's parts and failures over its samples (counted into `totals` too), and the
        projected lags of the groups started since the previous batch."""
        samples = [s for g in groups for s in g.samples]
        ledger.count(self.totals.ledger_tokens, Account.TRAINED, ledger.sample_tokens(samples))
        self.totals.reward_failed_samples.update(reward_failures(samples))
        lags, self.admission_lags = self.admission_lags, []
        figures = replace(
            self.totals.since(since.totals),
            reward_parts=reward_part_means(samples),
            admission_lag_mean=sum(lags) / len(lags) if lags else None,
            admission_lag_max=float(max(lags)) if lags else None,
        )
        return TrainBatch(groups=tuple(groups), figures=figures)


def reward_part_means(samples: Sequence[Sample]) -> dict[str, float] | None:
    """The mean of each named reward part over the samples that carry it (None: no sample
    carries parts, the reward returns a plain number)."""
    sums: dict[str, float] = {}
    counts: Counter[str] = Counter()
    for sample in samples:
        for name, value in (sample.metadata.get(REWARD_PARTS) or {}).items():
            sums[name] = sums.get(name, 0.0) + float(value)
            counts[name] += 1
    return {name: sums[name] / counts[name] for name in sums} or None


def reward_failures(samples: Sequence[Sample]) -> Counter[str]:
    """The samples whose reward call failed, by failure reason."""
    return Counter(
        str(reason) for s in samples if (reason := s.metadata.get(REWARD_FAILURE)) is not None
    )


def response_length_buckets(group: Group) -> Counter[str]:
    """The samples of `group` by response length bucket (`dressage.api.figures.length_bucket`
    of each sample's trainable tokens)."""
    return Counter(length_bucket(sum(s.loss_mask)) for s in group.samples)
