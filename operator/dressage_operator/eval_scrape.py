"""Reading a job's held-out evaluations from its own Prometheus `/metrics` (pure).

Trainer rank 0 exports, for each evaluated weight version it still lists (the latest few and
the best one), the gauges `dressage_eval_pass_at_k{version, k}`, `dressage_eval_reward_mean`,
`dressage_eval_step` and `dressage_eval_prompts` (each labelled `version`), and the counter
`dressage_eval_runs_total` (`dressage.metrics`). `parse_evaluation` turns one scrape into the
status's `EvaluationStatus`:

- latest: the exported version with the highest step (a version without a step counts as
  older than any with one), with its step, pass@1 and reward;
- best: the exported version with the highest pass@1 (ties go to the later step);
- runs: the counter.

`merge_evaluation` folds a scrape into what the status already says: the latest is the job's
(it is what the job evaluates now, also after a restart from a checkpoint), the best is the
status's memory, replaced only by a higher pass@1 (or an equal one at a later step), so a best
version the job stopped exporting stays named. A scrape without evaluations leaves the status
as it was. NaN figures (nothing measured yet) count as absent.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from dressage import metrics as names
from dressage.api.status import EvaluatedVersion, EvaluationStatus

HEADLINE_K = "1"
"""The `k` label of the headline figure, pass@1."""


@dataclass
class _Seen:
    step: int | None = None
    pass_at_1: float | None = None
    reward: float | None = None


def _number(value: float) -> float | None:
    return None if value != value else float(value)


def _order(entry: EvaluatedVersion) -> int:
    return -1 if entry.step is None else entry.step


def parse_evaluation(text: str) -> EvaluationStatus | None:
    """The evaluation block of the status from Prometheus text exposition; None when the job
    exports no evaluated version (no evaluation yet, or none configured)."""
    versions: dict[str, _Seen] = {}
    runs: float | None = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == names.EVAL_RUNS:
                runs = (runs or 0.0) + sample.value
                continue
            version = sample.labels.get("version")
            if not version:
                continue
            value = _number(sample.value)
            if sample.name == names.EVAL_PASS_AT_K and sample.labels.get("k") == HEADLINE_K:
                versions.setdefault(version, _Seen()).pass_at_1 = value
            elif sample.name == names.EVAL_REWARD_MEAN:
                versions.setdefault(version, _Seen()).reward = value
            elif sample.name == names.EVAL_STEP:
                versions.setdefault(version, _Seen()).step = None if value is None else int(value)
    entries = [
        EvaluatedVersion(version=v, step=s.step, pass_at_1=s.pass_at_1, reward=s.reward)
        for v, s in versions.items()
        if s.pass_at_1 is not None or s.reward is not None
    ]
    if not entries:
        return None
    latest = max(entries, key=_order)
    scored = [e for e in entries if e.pass_at_1 is not None]
    best = max(scored, key=lambda e: (e.pass_at_1, _order(e))) if scored else None
    return EvaluationStatus(latest=latest, best=best, runs=int(runs or 0))


def better(candidate: EvaluatedVersion | None, kept: EvaluatedVersion | None) -> bool:
    """Whether `candidate` replaces `kept` as the best: a higher pass@1, or the same at a
    later step."""
    if candidate is None or candidate.pass_at_1 is None:
        return False
    if kept is None or kept.pass_at_1 is None:
        return True
    return (candidate.pass_at_1, _order(candidate)) > (kept.pass_at_1, _order(kept))


def merge_evaluation(
    previous: EvaluationStatus | None, scraped: EvaluationStatus | None
) -> EvaluationStatus | None:
    """The status's evaluation block after a scrape: the scrape's latest and runs, the best of
    the two bests (`better`); the previous block when the scrape has none."""
    if scraped is None:
        return previous
    if previous is None:
        return scraped
    best = scraped.best if better(scraped.best, previous.best) else previous.best
    return scraped.model_copy(update={"best": best})
