"""The staleness budget: what a job in `spec.staleness.mode: auto` keeps its data within.

In `fixed` mode the user picks the in-flight depth (`spec.rollout.concurrency`) and the
batch-level window (`spec.staleness.keepVersions`) by hand. In `auto` mode the user states the
budget in the units they reason about, and the job chooses both itself, every step, to keep the
trainer fed without exceeding it (`dressage.rollout.budget`, `docs/staleness.md`, "The
staleness budget"):

- `maxLagVersions`: the largest version lag (`staleness/version_lag_max`, `dressage.rollout.lag`)
  a trained sample may have: how many weight versions behind the trainer's it was generated;
- `maxMismatchKL`: optionally, a ceiling on the step's mismatch KL between rollout and trainer
  logprobs (`mismatch_kl_k3`).

`spec.rollout.concurrency` is then the depth's upper bound, and admission control stays on (it
is what bounds the lag of what the depth starts).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from dressage.api.base import ApiModel

MAX_LAG_VERSIONS = 64
"""The largest `maxLagVersions` a budget may state."""


class StalenessMode(StrEnum):
    """Who chooses the in-flight depth and the version window."""

    FIXED = "fixed"
    """The user: `rollout.concurrency` groups in flight, `staleness.keepVersions` as given."""
    AUTO = "auto"
    """The job: both chosen every step to meet `staleness.budget`."""


class StalenessBudget(ApiModel):
    """The staleness a job in `staleness.mode: auto` keeps its trained data within."""

    max_lag_versions: int = Field(default=2, ge=1, le=MAX_LAG_VERSIONS)
    """The largest version lag a trained sample may have (`staleness/version_lag_max`): the
    trainer's version at the step minus the sample's trajectory version. The window
    (`keepVersions`) is at most one more than this; 0 would be synchronous rollout
    (`rollout.mode: sync`)."""
    max_mismatch_kl: float | None = Field(default=None, gt=0.0, alias="maxMismatchKL")
    """Optional ceiling on the step's mismatch KL (`mismatch_kl_k3`, k3 estimate of
    KL(rollout || train) over trained tokens): above it the job narrows the window and the
    depth. Unset: lag alone is the budget."""
