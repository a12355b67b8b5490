"""The embedded engine's step bookkeeping, pure: the pacing that spaces scheduler steps as a
slower accelerator would, and the cumulative figures of the steps taken."""

from __future__ import annotations

import dataclasses


class StepPacer:
    """Spaces scheduler steps at least `interval_s` apart (0: no pacing).

    Pure bookkeeping over an injected clock reading: `wait_s(now)` is how long the next step
    must still wait, `started(now)` records that a step began.
    """

    def __init__(self, interval_s: float) -> None:
        if interval_s < 0:
            raise ValueError(f"min step interval must be >= 0, got {interval_s}")
        self.interval_s = interval_s
        self._last_start: float | None = None

    def wait_s(self, now: float) -> float:
        if self.interval_s == 0 or self._last_start is None:
            return 0.0
        return max(0.0, self._last_start + self.interval_s - now)

    def started(self, now: float) -> None:
        self._last_start = now


@dataclasses.dataclass
class SchedulerStats:
    """Cumulative figures of the scheduler's steps, in the server info (`/get_server_info`;
    `/server_info` from 0.5.23 on).

    A step occupies the engine for `max(min step interval, its compute time)`: with pacing, the
    interval is what a decode step costs on the accelerator the engine stands in for. Over a
    window of wall time `W`, `active_seconds / W` is the share of time the engine was stepping
    and `slot_seconds / (W * max_batch_size)` the share of its decode slots that produced a
    token (how full its batches ran), the figure that shows an engine idling behind one long
    generation.
    """

    steps: int = 0
    """Steps that produced at least one token."""
    tokens: int = 0
    """Tokens produced (decoded, and the first token of each admitted prompt)."""
    prefill_tokens: int = 0
    """Tokens run through prefill: new prompts and caches recomputed on re-admission."""
    active_seconds: float = 0.0
    slot_seconds: float = 0.0
    """Sum over steps of (requests that got a token) x (the step's occupancy)."""

    def record_step(self, *, seconds: float, tokens: int) -> None:
        if tokens:
            self.steps += 1
            self.tokens += tokens
            self.active_seconds += seconds
            self.slot_seconds += seconds * tokens

    def snapshot(self) -> dict[str, float]:
        return dataclasses.asdict(self)
