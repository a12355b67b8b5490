"""Sessions and segments: the pure state of every trajectory the proxy serves.

A *session* is one trajectory (`session_id`, which becomes the samples' `parent_traj_id`) of
one prompt instance (`instance_id`, the GRPO group). Its tokens are kept in *segments*: a
segment is one prompt followed by everything generated or appended after it. Invariants:

- Token-prefix consistency: a turn continues the current segment only when its input tokens
  start with the segment's tokens exactly; the extra tokens (user text, tool output) are
  appended with loss mask 0 and no version. Tokens are never re-tokenized.
- Anything else (a history rewrite, a tool-schema change) closes the segment and opens a new
  one of the same trajectory with the next `segment_index`.
- Every response token has its own version (None when unknown); model tokens have loss mask 1.
- One generation at a time per session (`busy`), and a session stopped by a refusal keeps
  refusing.
- Routed experts (when recorded) cover a prefix of the segment's tokens, one row per token; a
  later turn adds the rows beyond them (its own tokens and the appended ones it forwarded) and
  never rewrites earlier rows: each keeps the routing of the forward pass that produced the
  token after it.

Bounded by construction: at most `max_sessions` live sessions. A new session at the cap takes
the place of the least recently used idle session, when that one has been idle for at least
`evict_idle_s` (an abandoned trajectory: its agent never finalized it), and is counted
(`evicted`); when none qualifies (every session is busy or was used within `evict_idle_s`),
the new one is refused with 429 `too_many_sessions` and a `Retry-After`, and the live
trajectories are kept. The sessions are kept in the order their turns last began, so an
abandoned one is found in the first few looked at (past the busy ones, at most the admitted
generations); only a refusal looks at them all, once, at the cap.

Time comes from the caller (`now` arguments), so expiry is tested without sleeping.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dressage.api.bounds import DEFAULT_MAX_SESSIONS
from dressage.data.expert_routing import RoutedExperts, merge_routes
from dressage.data.versions import normalized_versions
from dressage.proxy import errors
from dressage.proxy.errors import ProxyError


@dataclass
class Segment:
    """One segment of a trajectory: a prompt and a response with per-token metadata."""

    index: int
    prompt_tokens: list[int]
    response_tokens: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[str | None] = field(default_factory=list)
    turns: int = 0
    preempts: int = 0
    drained_tokens: int = 0
    """Response tokens generated on an engine that was then drained, kept as their turn
    continued on another engine (`dressage.proxy.drain`)."""
    routed_experts: RoutedExperts | None = None
    """The routed experts of the first `rows` tokens (None: none recorded)."""
    closed_reason: str | None = None
    """Why the segment was closed: `history_rewrite`, `tools_changed`, `finalized`,
    or a refusal name."""

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_tokens) + len(self.response_tokens)

    def tokens(self) -> list[int]:
        return self.prompt_tokens + self.response_tokens

    def is_prefix_of(self, input_ids: Sequence[int]) -> bool:
        """Whether `input_ids` starts with this segment's tokens exactly."""
        n_prompt = len(self.prompt_tokens)
        if len(input_ids) < self.num_tokens:
            return False
        return (
            list(input_ids[:n_prompt]) == self.prompt_tokens
            and list(input_ids[n_prompt : self.num_tokens]) == self.response_tokens
        )


@dataclass(frozen=True)
class TurnPlan:
    """What one turn will do to its session, decided before generating.

    `new_segment` is None when the turn continues the current segment, else the reason the
    current one closes (`first_turn`, `history_rewrite`, `tools_changed`); `appended` are the
    tokens added to the current segment before the generation (loss mask 0).
    """

    input_ids: tuple[int, ...]
    new_segment: str | None
    appended: tuple[int, ...]


@dataclass
class Session:
    """One trajectory."""

    session_id: str
    instance_id: str | None
    created_at: float
    last_active: float
    segments: list[Segment] = field(default_factory=list)
    """Closed segments, then the current one (if any) last."""
    current: Segment | None = None
    versions_seen: list[str] = field(default_factory=list)
    """Distinct real response versions of the whole trajectory, in observation order."""
    busy: bool = False
    refusal: ProxyError | None = None
    """The refusal that stopped this trajectory; answered again to any later generation."""
    engine_url: str | None = None
    """The engine this session sticks to."""
    chat: Any = None
    """State of the OpenAI chat layer (messages and rendered text), opaque here."""
    preempts: int = 0
    turns: int = 0

    # --- turns ----------------------------------------------------------------------------

    def check_can_generate(self) -> None:
        if self.refusal is not None:
            raise self.refusal
        if self.busy:
            raise ProxyError(
                409,
                errors.SESSION_BUSY,
                f"session {self.session_id!r} already has a generation in flight; a trajectory "
                "generates one turn at a time",
            )

    def plan_turn(
        self, input_ids: Sequence[int], *, force_new_segment: str | None = None
    ) -> TurnPlan:
        """Decide how `input_ids` relates to the current segment (pure; see `begin_turn`)."""
        ids = tuple(input_ids)
        seg = self.current
        if seg is None:
            return TurnPlan(ids, "first_turn", ())
        if force_new_segment is not None:
            return TurnPlan(ids, force_new_segment, ())
        if seg.is_prefix_of(ids):
            return TurnPlan(ids, None, ids[seg.num_tokens :])
        return TurnPlan(ids, "history_rewrite", ())

    def begin_turn(
        self, input_ids: Sequence[int], now: float, *, force_new_segment: str | None = None
    ) -> TurnPlan:
        """Plan a turn and mark the session busy until `commit_turn` or `end_turn`."""
        self.check_can_generate()
        plan = self.plan_turn(input_ids, force_new_segment=force_new_segment)
        self.busy = True
        self.last_active = now
        return plan

    def end_turn(self, now: float) -> None:
        """Release the session after a turn that recorded nothing (an error)."""
        self.busy = False
        self.last_active = now

    def commit_turn(
        self,
        plan: TurnPlan,
        output_ids: Sequence[int],
        logprobs: Sequence[float],
        versions: Sequence[object],
        now: float,
        *,
        preempts: int = 0,
        drained_tokens: int = 0,
        routed_experts: RoutedExperts | None = None,
    ) -> Segment:
        """Record a finished generation (with the routed experts of its input and output
        tokens, when recorded); returns the segment it went into."""
        if not len(output_ids) == len(logprobs) == len(versions):
            raise ValueError("output_ids, logprobs and versions must have one entry per token")
        seg = self.current
        if plan.new_segment is not None or seg is None:
            if seg is not None:
                seg.closed_reason = plan.new_segment
            seg = Segment(index=len(self.segments), prompt_tokens=list(plan.input_ids))
            self.segments.append(seg)
            self.current = seg
        else:
            n = len(plan.appended)
            seg.response_tokens.extend(plan.appended)
            seg.loss_mask.extend([0] * n)
            seg.logprobs.extend([0.0] * n)
            seg.versions.extend([None] * n)
        labels = normalized_versions(versions)
        seg.response_tokens.extend(map(int, output_ids))
        seg.loss_mask.extend([1] * len(output_ids))
        seg.logprobs.extend(map(float, logprobs))
        seg.versions.extend(labels)
        seg.routed_experts = merge_routes(seg.routed_experts, routed_experts)
        seg.turns += 1
        seg.preempts += preempts
        seg.drained_tokens += drained_tokens
        self.preempts += preempts
        self.turns += 1
        seen = set(self.versions_seen)
        for label in dict.fromkeys(labels):
            if label is not None and label not in seen:
                seen.add(label)
                self.versions_seen.append(label)
        self.busy = False
        self.last_active = now
        return seg

    def refuse(self, error: ProxyError, now: float) -> None:
        """Stop the trajectory: every later generation gets `error` again."""
        self.refusal = error
        self.busy = False
        self.last_active = now
        if self.current is not None and self.current.closed_reason is None:
            self.current.closed_reason = error.name

    def close(self) -> list[Segment]:
        """Close the current segment; returns every segment of the trajectory."""
        if self.current is not None and self.current.closed_reason is None:
            self.current.closed_reason = "finalized"
        self.current = None
        return list(self.segments)

    def summary(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "instance_id": self.instance_id,
            "segments": len(self.segments),
            "segment_index": self.current.index if self.current is not None else None,
            "num_tokens": self.current.num_tokens if self.current is not None else 0,
            "turns": self.turns,
            "preempts": self.preempts,
            "versions": list(self.versions_seen),
            "busy": self.busy,
            "refusal": self.refusal.body()["error"] if self.refusal is not None else None,
            "engine_url": self.engine_url,
        }


@dataclass
class FinishedTrajectory:
    """A finalized session's segment records waiting to be read."""

    instance_id: str | None
    records: list[dict[str, Any]]
    finished_at: float


DEFAULT_EVICT_IDLE_S = 60.0
"""How long a session must have been idle before a new one at the cap may take its place."""


class SessionStore:
    """Active sessions and finalized trajectories, with idle expiry and a cap on live sessions
    (see the module docstring).

    Single-threaded by design: the proxy touches it only from its event loop.
    """

    def __init__(
        self,
        ttl_s: float,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        evict_idle_s: float = DEFAULT_EVICT_IDLE_S,
    ) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions: must be >= 1, got {max_sessions}")
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self.evict_idle_s = evict_idle_s
        self.evicted = 0
        """Sessions dropped to make room for a new one."""
        self.on_evict: Callable[[], None] | None = None
        """Called once per eviction (the proxy counts them in its metrics)."""
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        """Least recently used first."""
        self._finished: OrderedDict[str, FinishedTrajectory] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    def get_or_create(self, session_id: str, instance_id: str | None, now: float) -> Session:
        """The session `session_id` (marked most recently used), created when new: at the cap,
        in place of an abandoned one, else 429 `too_many_sessions`."""
        session = self._sessions.get(session_id)
        if session is None:
            if session_id in self._finished:
                raise ProxyError(
                    409,
                    errors.SESSION_FINALIZED,
                    f"session {session_id!r} was finalized; a new trajectory needs a new id",
                )
            if len(self._sessions) >= self.max_sessions:
                self._evict_one(now)
            session = Session(session_id, instance_id, created_at=now, last_active=now)
            self._sessions[session_id] = session
            return session
        self._sessions.move_to_end(session_id)
        if instance_id is not None and session.instance_id is None:
            session.instance_id = instance_id
        return session

    def _evict_one(self, now: float) -> None:
        """Drop the least recently used idle session when it has been idle `evict_idle_s`;
        else 429: every live session is in use."""
        for session in self._sessions.values():
            if not session.busy and now - session.last_active >= self.evict_idle_s:
                del self._sessions[session.session_id]
                self.evicted += 1
                if self.on_evict is not None:
                    self.on_evict()
                return
        raise ProxyError(
            429,
            errors.TOO_MANY_SESSIONS,
            f"{len(self._sessions)} live sessions, the limit is {self.max_sessions} "
            f"(max_sessions), none idle for {self.evict_idle_s:.0f}s; finalize or delete "
            "finished sessions, or retry later",
            headers={"Retry-After": str(max(1, round(self.evict_idle_s / 4)))},
        )

    def finalize(self, session_id: str, records: list[dict[str, Any]], now: float) -> None:
        """Move a session's records to the finished queue and forget the session."""
        session = self._sessions.pop(session_id)
        self._finished[session_id] = FinishedTrajectory(session.instance_id, records, now)

    def delete(self, session_id: str) -> bool:
        """Forget a session without keeping its records."""
        found = self._sessions.pop(session_id, None) is not None
        return self._finished.pop(session_id, None) is not None or found

    def read_finished(self, instance_id: str | None, *, drain: bool) -> list[dict[str, Any]]:
        """Records of finalized trajectories (of one instance, or all), oldest first."""
        out: list[dict[str, Any]] = []
        taken = []
        for session_id, finished in self._finished.items():
            if instance_id is None or finished.instance_id == instance_id:
                out.extend(finished.records)
                taken.append(session_id)
        if drain:
            for session_id in taken:
                del self._finished[session_id]
        return out

    def expire(self, now: float) -> list[Session]:
        """Drop idle sessions and unread finished trajectories older than the TTL."""
        expired = [
            s for s in self._sessions.values() if not s.busy and now - s.last_active > self.ttl_s
        ]
        for session in expired:
            del self._sessions[session.session_id]
        stale = [k for k, f in self._finished.items() if now - f.finished_at > self.ttl_s]
        for key in stale:
            del self._finished[key]
        return expired

    @property
    def finished_count(self) -> int:
        return len(self._finished)
