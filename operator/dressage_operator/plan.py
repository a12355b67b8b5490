"""The messages of one reconcile cycle (pure data).

`Observed` is what the handler read; `decide` turns it into a `Plan`; the handler applies the
plan and reports one `ChildResult` per write; `settle` turns plan and results into the
`Outcome` the handler writes and posts.

A refusal is permanent or temporary by what the API server answered (`permanent_refusal`):
400 (the object cannot be decoded), 422 (invalid) and 403 (forbidden by an admission check:
Pod Security, a policy webhook, a missing PriorityClass) say the object cannot be created as
it is, so the same write is not retried for the same spec; a 403 for a full ResourceQuota
(`exceeded quota`), a 409, a 5xx, a 429 and an answer that never came (a timeout, a lost
connection) can heal by themselves and are retried with backoff.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from dressage.api.status import AsyncRLJobStatus
from dressage_operator.children import Obj
from dressage_operator.observe import PodInfo
from dressage_operator.staleness_scrape import ScrapeResult

REASON_CHILD_REFUSED = "ChildRefused"
"""The `Failed` reason of a job whose child the API server refused permanently before the job
ran: it stays Failed until its spec changes."""
PERMANENT_CODES = frozenset({400, 403, 422})


def permanent_refusal(code: int | None, message: str) -> bool:
    """Whether an API server's refusal of a write stands until the object changes (see the
    module docstring); a ResourceQuota's 403 (`plugin/pkg/admission/resourcequota`: `exceeded
    quota: ...`) waits for capacity instead."""
    if code == 403 and "exceeded quota" in message.lower():
        return False
    return code in PERMANENT_CODES


@dataclass(frozen=True)
class Observed:
    """Everything `decide` and `settle` look at besides the spec."""

    generation: int
    status: AsyncRLJobStatus
    now: datetime
    pods: tuple[PodInfo, ...] = ()
    proxy_present: bool = False
    proxy_ready: int = 0
    handled_failures: frozenset[str] = frozenset()
    """uids of failed engine pods already counted (the pod index may lag a deletion)."""
    scrape: ScrapeResult | None = None
    spec_errors: tuple[tuple[str, str], ...] = ()
    """`(field, message)` pairs the spec fails on (`validation.spec_errors`); any makes the job
    Failed."""
    limit_errors: tuple[tuple[str, str], ...] = ()
    """`(field, message)` pairs of fields above this cluster's limits (`limits.limit_errors`):
    refused like an invalid spec, with reason `LimitExceeded`."""
    infrastructure_checked: tuple[int, datetime | None] = (-1, None)
    """(generation, time) of the last ConfigMap/Service check that every write passed."""
    refused_cycles: int = 0
    """Consecutive previous cycles in which a write failed temporarily (the backoff)."""
    blocked: tuple[ChildResult, ...] = ()
    """Permanent refusals of this spec generation, earlier in this operator's life: the
    handler does not repeat those writes and reports these results again instead."""


@dataclass(frozen=True)
class Event:
    type: str
    reason: str
    message: str


@dataclass
class Plan:
    """What to do this cycle."""

    status: AsyncRLJobStatus
    """The status before the writes' results are known (`settle` completes it)."""
    create_pods: list[Obj] = field(default_factory=list)
    delete_pods: list[str] = field(default_factory=list)
    ensure_infrastructure: bool = False
    """Get-or-create-or-patch the ConfigMap and Services: when the generation changed, after
    a check that did not pass, and once per resync interval (to undo manual drift)."""
    engines_leaving: tuple[int, ...] = ()
    """Indexes of engine pods beyond `inference.replicas` that still exist (a scale-down
    deleting them): the ConfigMap keeps listing them, so the proxy still has them while their
    `preStop` hook drains them, and is written again once they are gone."""
    ensure_proxy: bool = False
    delete_proxy: bool = False
    delete_job: bool = False
    scale_to: int | None = None
    """The engine count the autoscaler chose, written through the job's scale subresource
    (`spec.inference.autoscaling`); None: no change."""
    requeue_after: float | None = None
    events: list[Event] = field(default_factory=list)
    handled_failures: frozenset[str] = frozenset()
    invalid: bool = False
    """The spec is invalid: nothing is written but the status."""


class Applied(StrEnum):
    """How one write of the plan went."""

    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    DELETED = "deleted"
    CONFLICT = "conflict"
    """409 on create: the name is still taken (an old pod terminating, or the index lagged)."""
    NOT_OWNED = "not-owned"
    """An object with the child's name exists and is another owner's (an earlier job of the
    same name, whose children the garbage collector has yet to delete): left alone, and shown
    like a refusal until it is gone."""
    REFUSED = "refused"
    """The API server answered with an error (422 Invalid, 403 Forbidden, 503, ...), or no
    answer came (a timeout: no `code`); `ChildResult.permanent` tells which."""
    CORRECTED = "corrected"
    """The child was written from the job's current spec but had drifted (edited or scaled by
    hand): set back; `ChildResult.message` names the fields."""


@dataclass(frozen=True)
class ChildResult:
    """One write of the plan (create, patch or delete of a child) and the API server's answer."""

    kind: str
    name: str
    verb: str
    """`create`, `patch` or `delete`."""
    applied: Applied
    code: int | None = None
    """HTTP status of a refusal or conflict."""
    message: str = ""
    """The API server's message."""
    field: str = ""
    """The first field the API server names (`details.causes[].field`), if any."""

    @property
    def permanent(self) -> bool:
        """A refusal that stands until the object changes (`permanent_refusal`)."""
        return self.applied is Applied.REFUSED and permanent_refusal(self.code, self.message)

    def describe(self) -> str:
        if self.applied is Applied.NOT_OWNED:
            return f"{self.kind} {self.name} exists and is not this job's: {self.message}"
        how = "refused" if self.permanent else "failed"
        answer = f" (HTTP {self.code})" if self.code is not None else ""
        text = f"{self.kind} {self.name}: {self.verb} {how}{answer}: {self.message}"
        if self.field and self.field not in self.message:
            text += f" (field {self.field})"
        return text


@dataclass(frozen=True)
class Outcome:
    """The end of a cycle: what to write, post and remember, and when to run again."""

    status: AsyncRLJobStatus
    events: list[Event]
    delay: float | None
    """Seconds until the next cycle; None ends the job's loop (the job is being deleted)."""
    result: str
    """`ok`, `retry` (a conflict), `refused` or `invalid`: the reconcile counter's label."""
    infrastructure_checked: tuple[int, datetime | None]
    refused_cycles: int
    blocked: tuple[ChildResult, ...] = ()
    """This cycle's permanent refusals: not to be repeated for this spec generation."""
