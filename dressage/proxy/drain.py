"""Draining an engine that is going away, and what an engine's failure costs a turn (pure).

An engine leaves the job in one of two ways:

- **Drained** (scale-down, a replacement the operator starts, a pod told to stop: node drain,
  spot notice, preemption, through the engine pod's `preStop` hook): `POST
  /dressage/engines/drain {"url"}` (`dressage.proxy.endpoints.drain`) takes the engine out of
  routing (`EnginePool.start_drain`: no new turn, no sticky session goes there), aborts its
  generations in flight (SGLang's `/abort_request {"abort_all": true}`, which 0.5.2 and 0.5.23
  read alike: `tokenizer_manager.abort_request`), and answers once none of the proxy's
  generations is in flight on it. Each aborted piece comes back with the tokens it had, and the
  turn continues on another engine as after a weight-update pause (`Interruption.DRAIN`): with
  partial rollout the prompt plus those tokens are resubmitted with the remaining budget, each
  token keeping the version it was generated under, and the version rule (the preempt limit)
  checks the turn after every piece; without partial rollout the turn is generated again from
  its prompt. Nothing the engine generated is lost, and the pod is deleted only then.
- **Crashed** (no drain was possible): its turns in flight fail. A request that never reached
  it, or whose engine died before any token of this turn came back, is sent to another engine
  (regenerated from where the turn stood); one that dies after part of the turn was received
  answers 502 `engine_failed`, and the rollout retries its prompt group
  (`dressage_rollout_failed_attempts_total{reason="engine_failed"}`). The proxy counts every
  such hit in `dressage_proxy_engine_failed_turns_total{reason}` with the reasons below.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Final

from dressage.proxy import errors
from dressage.proxy.errors import ProxyError

LOST_NOT_SENT: Final = "connect_failed"
"""No connection to the engine: the request never reached it and went to another engine."""
LOST_REGENERATED: Final = "connection_lost"
"""The engine's connection broke before any token of the turn came back: the turn is generated
on another engine; what the dead engine had generated of it is lost with it."""
LOST_AFTER_TOKENS: Final = "connection_lost_mid_turn"
"""The engine's connection broke after part of the turn came back (a turn resumed after a
pause or a drain): 502 `engine_failed`, and the rollout retries the prompt group."""
LOST_TIMEOUT: Final = "reply_timeout"
"""The engine sent no answer within `--engine-timeout-s`: 504 `engine_timeout`."""
LOST_REASONS: Final = (LOST_NOT_SENT, LOST_REGENERATED, LOST_AFTER_TOKENS, LOST_TIMEOUT)

DEFAULT_DRAIN_TIMEOUT_S: Final = 20.0
"""How long a drain waits for the engine's generations in flight to come back aborted. An
abort takes effect at the engine's next decode step and the answer comes straight back, so a
drain normally takes well under a second; the bound keeps a stuck engine from holding its
pod's termination past the grace period (see the operator's engine builder)."""
ABORT_RESEND_S: Final = 1.0
"""While generations are still in flight on a draining engine, the abort is sent again this
often: a request the proxy had routed to it just before the drain began may reach the engine
after the first abort (SGLang ignores an abort of a request it does not hold yet)."""


class Interruption(enum.Enum):
    """Why an engine answered a piece as aborted, when the proxy resumes the turn."""

    PAUSE = "pause"
    """A weight-update pause (the gate closed, or a pause came and went meanwhile)."""
    DRAIN = "drain"
    """The engine is draining: the turn continues on another engine."""


def interruption(
    finish_reason: Mapping[str, Any], *, paused: bool, draining: bool
) -> Interruption | None:
    """Whether a piece that finished with `finish_reason` was interrupted for the proxy to
    resume, and by what: an abort during (or across) a pause is a pause's, else one while its
    engine drains is the drain's. Any other abort (a client's `/abort_request`) ends the turn
    with the tokens it had, as does every other finish."""
    if finish_reason.get("type") != "abort":
        return None
    if paused:
        return Interruption.PAUSE
    if draining:
        return Interruption.DRAIN
    return None


def drain_answer(
    url: str, *, aborted: int, remaining: int, waited_s: float, timeout_s: float
) -> dict[str, Any]:
    """The drain endpoint's answer once nothing of the proxy's is in flight on the engine;
    `ProxyError` 504 `drain_timeout` with the same detail while generations remain there
    (they are lost if the engine ends now, and counted as a crash's)."""
    body: dict[str, Any] = {
        "url": url,
        "draining": True,
        "drained": remaining == 0,
        "aborted_generations": aborted,
        "inflight": remaining,
        "waited_s": round(waited_s, 3),
    }
    if remaining == 0:
        return body
    raise ProxyError(
        504,
        errors.DRAIN_TIMEOUT,
        f"{remaining} generation(s) still in flight on {url} after {timeout_s:g}s of draining; "
        "the engine keeps taking no new turns",
        detail=body,
    )
