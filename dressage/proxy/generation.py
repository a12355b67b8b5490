"""Generations against the engines: routing, retries, pauses and partial-rollout resumes.

One `Generation` is one model turn. It is sent to an engine as SGLang's `/generate` with
logprobs. The generator holds the proxy's version rule (`dressage.proxy.span_rule`), which
decides what happens when a weight-update pause (`PauseGate`) aborts a turn on the engine:

- when the rule resumes partial output (partial rollout), the turn waits for `continue`, then
  resubmits the prompt plus the tokens generated so far with the remaining token budget; each
  piece's tokens keep the versions the engine reported for them (`meta_info.weight_versions`,
  else `meta_info.weight_version`);
- otherwise the partial output is discarded and the turn is generated again from its prompt
  after `continue`, so a turn never mixes versions. An evaluation group's turns always go
  this way (`span_rule.rule_for_session`): an evaluation is never resumed across a publish.

Either way the interruption counts as a preempt. The rule also checks the turn's versions
against the session's earlier ones, after every piece when it resumes, else once at the end;
its `StalenessRefusal` propagates to the caller.

Engine failures: a request that never reached its engine (connection refused) or whose engine
died before any token of this turn came back is sent to another healthy engine; an engine
dying after part of the turn was received answers 502 `engine_failed`; an engine silent beyond
the timeout answers 504 `engine_timeout`. Each counts once by reason
(`dressage_proxy_engine_failed_turns_total{reason}`, `dressage.proxy.drain`).

Draining (`dressage.proxy.drain`): a piece aborted while its engine drains was interrupted the
way a pause interrupts it, and continues the same way, at once and on another engine (the
drained one is no longer routable): resubmitted with its tokens (partial rollout) or
generated again from its prompt (without), counted in `dressage_proxy_drained_turns_total`.
With partial rollout the tokens the drained engine had generated stay in the turn: they are
counted in `dressage_proxy_drained_tokens_total` and in the turn's `drained_tokens`, which
reach its segment record and the trained sample (`Sample.metadata["drained_tokens"]`), so a
run can show that every token moved off a drained engine was trained. A moved turn that then
fails loses them: `dressage_proxy_drained_tokens_lost_total{reason}`.

A busy engine is not a failed one. SGLang (v0.5.2 `managers/scheduler.py`) turns a request
away when its waiting queue holds `--max-queued-requests`: `FINISH_ABORT` with status 503 and
"The request queue is full.", which `tokenizer_manager` raises as `HTTPException(503)` and
`http_server` renders as `{"object": "error", "message": ..., "type": "503", "code": 503}`.
The engine never took the request, so a 503 leaves the engine routable (the health
loop alone decides health): the turn goes to another engine not yet tried, and when every
engine turned it away, waits with exponential backoff (`BUSY_BACKOFF_S` doubling up to
`BUSY_BACKOFF_MAX_S`) and tries them again, for at most `busy_timeout_s`; then it answers 503
`engine_busy` with `Retry-After`. Each such 503 counts in `dressage_proxy_engine_busy_total`.

Routed experts (MoE models, routing replay): a turn asked for them sends SGLang's
`return_routed_experts` to engines whose release has it (`sglang_support.ROUTED_EXPERTS`; it is
left out for older ones, which would ignore it) and keeps `meta_info.routed_experts`, the
routing of every forwarded token of the piece's input and output; across the pieces of a
resumed turn a position keeps its first report (`dressage.data.expert_routing`).

The engines are called through `EngineConnections` (pooled keep-alive connections): it is
on the hot path, and its CPU per request is most of what the proxy adds to a generation. What
is sent and how an answer's status is read are the engine contract's (`dressage.engine.wire`:
the body for each release, the error class of a status, the field a refusal names), shared
with `dressage.engine.client`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson

from dressage.data.expert_routing import RoutedExperts
from dressage.data.groups import is_evaluation_group
from dressage.data.spans import (
    VersionSpan,
    expand_version_spans,
    spans_from_sglang,
)
from dressage.engine.errors import EngineRequestError, EngineUnavailable
from dressage.engine.sglang_support import SGLANG_MIN_VERSION
from dressage.engine.wire import (
    GENERATE,
    UnsupportedField,
    body_for_release,
    refused_field,
    status_error,
)
from dressage.proxy import errors
from dressage.proxy.adapters import name_adapter, stamped
from dressage.proxy.drain import (
    LOST_AFTER_TOKENS,
    LOST_NOT_SENT,
    LOST_REGENERATED,
    LOST_TIMEOUT,
    Interruption,
    interruption,
)
from dressage.proxy.engine_pool import EnginePool, EngineState
from dressage.proxy.errors import ProxyError, invalid
from dressage.proxy.pieces import Generation, Piece
from dressage.proxy.sessions import Session
from dressage.proxy.span_rule import StalenessRefusal, VersionRule, rule_for_session
from dressage.proxy.upstream import (
    ConnectFailed,
    ConnectionLost,
    EngineConnections,
    ReplyTimeout,
)

dumps = orjson.dumps
loads = orjson.loads

BUSY_BACKOFF_S = 0.05
"""First wait after every engine answered 503 (queue full); doubled after each round."""
BUSY_BACKOFF_MAX_S = 2.0
"""Longest wait between two rounds of busy engines."""
DEFAULT_BUSY_TIMEOUT_S = 60.0
"""How long a turn keeps retrying engines whose queues are full before 503 `engine_busy`."""

RESTARTED = "restarted"
"""The reason a preempted turn's tokens are lost without partial rollout (generated again)."""

RESUMES_FIRST_S = 1.0
"""Longest a new turn waits, after a continue, for the resumed turns to be sent first."""

DEFAULT_MAX_NEW_TOKENS = 128
"""SGLang's default `max_new_tokens`, used to size the remaining budget of a resume."""


class PauseGate:
    """The proxy's view of weight-update pauses: closed between pause and continue.

    `epoch` counts pauses; a generation that comes back aborted while the gate is closed or
    after the epoch moved was preempted by a pause (not aborted for another reason).

    Resumed turns go first: a turn resuming its partial output (partial rollout) holds the
    gate's resume count from before it waits until its piece is sent (`hold_resume`,
    `resume_sent`), and a new turn waits for that count to reach 0 (at most
    `RESUMES_FIRST_S`) before it is sent: at a continue, the engines queue the resumed pieces
    ahead of new work, so long responses finish within their span more often.
    """

    def __init__(self) -> None:
        self.paused = False
        self.epoch = 0
        self._open = asyncio.Event()
        self._open.set()
        self._resuming = 0
        self._resumed = asyncio.Event()
        self._resumed.set()

    def hold_resume(self) -> None:
        self._resuming += 1
        self._resumed.clear()

    def resume_sent(self) -> None:
        self._resuming -= 1
        if self._resuming <= 0:
            self._resuming = 0
            self._resumed.set()

    async def wait_resumes(self, timeout_s: float = RESUMES_FIRST_S) -> None:
        """Return once no resumed turn waits to be sent (or after `timeout_s`: a new turn is
        delayed, never stopped, by a resume that is slow to go)."""
        if self._resumed.is_set():
            return
        try:
            await asyncio.wait_for(self._resumed.wait(), timeout_s)
        except TimeoutError:
            return

    def pause(self) -> None:
        self.paused = True
        self.epoch += 1
        self._open.clear()

    def resume(self) -> None:
        self.paused = False
        self._open.set()

    async def wait_open(self, timeout_s: float) -> None:
        if self._open.is_set():
            return
        try:
            await asyncio.wait_for(self._open.wait(), timeout_s)
        except TimeoutError:
            raise ProxyError(
                503,
                errors.PAUSE_TIMEOUT,
                f"generation paused for a weight update for more than {timeout_s:.0f}s without "
                "/continue_generation",
                headers={"Retry-After": "5"},
            ) from None


def parse_piece(data: object, url: str, prompt_tokens: int | None = None) -> Piece:
    """Parse an SGLang generate response to a prompt of `prompt_tokens` tokens (needed to
    read `meta_info.routed_experts`); `ProxyError` 502 when it is not one."""

    def bad(message: str) -> ProxyError:
        return ProxyError(
            502, errors.ENGINE_ERROR, f"engine {url} sent an invalid generate response: {message}"
        )

    if not isinstance(data, dict):
        raise bad("not a JSON object")
    meta = data.get("meta_info")
    output_ids = data.get("output_ids")
    if isinstance(meta, dict) and output_ids is None and _is_abort(meta.get("finish_reason")):
        # An abort of a request still queued ("Abort before prefill", SGLang v0.5.2
        # `tokenizer_manager._handle_abort_req`) carries no output_ids: no token was made.
        output_ids = []
    if not isinstance(meta, dict) or not isinstance(output_ids, list):
        raise bad("missing meta_info or output_ids")
    n = len(output_ids)
    raw_logprobs = meta.get("output_token_logprobs") or []
    if len(raw_logprobs) != n:
        raise bad(f"{len(raw_logprobs)} output_token_logprobs for {n} output tokens")
    logprobs = [float(entry[0]) if entry[0] is not None else 0.0 for entry in raw_logprobs]
    weight_version = meta.get("weight_version")
    weight_version = None if weight_version is None else str(weight_version)
    spans = meta.get("weight_versions")
    versions: list[str | None]
    runs: list[VersionSpan]
    if spans:
        try:
            runs = spans_from_sglang(spans, n)
        except ValueError as exc:
            raise bad(str(exc)) from None
        versions = expand_version_spans(runs)
    else:
        versions = [weight_version] * n
        runs = [VersionSpan(weight_version, n)] if n else []
    latency = meta.get("e2e_latency")
    routed: RoutedExperts | None = None
    routes = meta.get("routed_experts")
    if routes is not None and prompt_tokens is not None and prompt_tokens + n > 1:
        if not isinstance(routes, str):
            raise bad("meta_info.routed_experts is not a base64 string")
        try:
            routed = RoutedExperts.from_base64(routes, prompt_tokens + n - 1)
        except ValueError as exc:
            # An aborted piece is resubmitted or dropped anyway, and the next answer covers
            # its tokens again: its routes are not worth failing the turn for.
            if not _is_abort(meta.get("finish_reason")):
                raise bad(f"meta_info.{exc} ({prompt_tokens} prompt + {n} output tokens)") from None
    finish = meta.get("finish_reason")
    if not isinstance(finish, dict):
        finish = {"type": "stop"} if finish is None else {"type": str(finish)}
    return Piece(
        output_ids=output_ids,
        logprobs=logprobs,
        versions=versions,
        finish_reason=finish,
        text=str(data.get("text") or ""),
        weight_version=weight_version,
        cached_tokens=int(meta.get("cached_tokens") or 0),
        raw_logprobs=raw_logprobs,
        runs=runs,
        engine_latency=(
            float(latency)
            if isinstance(latency, int | float) and not isinstance(latency, bool)
            else None
        ),
        routed_experts=routed,
        meta_info=meta,
    )


def _is_abort(finish: object) -> bool:
    return isinstance(finish, dict) and finish.get("type") == "abort"


class Generator:
    """Runs generations for sessions against the engine pool."""

    def __init__(
        self,
        *,
        connections: EngineConnections,
        pool: EnginePool,
        gate: PauseGate,
        rule: VersionRule,
        engine_timeout_s: float,
        pause_timeout_s: float,
        on_preempt: Callable[[], None],
        on_retry: Callable[[], None],
        on_busy: Callable[[str], None] = lambda url: None,
        busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
        on_drained: Callable[[str], None] = lambda url: None,
        on_drained_tokens: Callable[[str, int], None] = lambda url, tokens: None,
        on_drained_tokens_lost: Callable[[int, str], None] = lambda tokens, reason: None,
        on_lost: Callable[[str], None] = lambda reason: None,
        on_tokens_lost: Callable[[int, str, bool], None] = lambda tokens, why, evaluation: None,
        lora_base_version: str | None = None,
    ) -> None:
        self.lora_base_version = lora_base_version  # a LoRA job's (`dressage.proxy.adapters`)
        self.connections = connections
        self.pool = pool
        self.gate = gate
        self.rule = rule
        self.engine_timeout_s = engine_timeout_s
        self.pause_timeout_s = pause_timeout_s
        self.on_preempt = on_preempt
        self.on_retry = on_retry
        self.on_busy = on_busy
        """Called with the engine's URL for every 503 (queue full) it answered."""
        self.busy_timeout_s = busy_timeout_s
        self.on_drained = on_drained
        """Called with the engine's URL for every piece a drain of that engine aborted (the
        turn then continues on another engine)."""
        self.on_drained_tokens = on_drained_tokens
        """Called with the engine's URL and the number of tokens of each drained piece that the
        turn keeps (partial rollout) as it continues on another engine."""
        self.on_drained_tokens_lost = on_drained_tokens_lost
        """Called with the drained tokens a turn held and the name of the failure that then
        ended it (`run`)."""
        self.on_lost = on_lost
        self.on_tokens_lost = on_tokens_lost
        """Called with the tokens of a turn the proxy received and no sample will hold, the
        reason (`restarted`: a preempt without partial rollout; else the failure's name) and
        whether the session is an evaluation's (the token ledger's proxy side)."""
        """Called with the reason (`dressage.proxy.drain.LOST_*`) for every engine failure
        that hit a turn: retried on another engine, or lost (502 `engine_failed`)."""

    async def run(
        self,
        session: Session,
        input_ids: list[int],
        sampling_params: dict[str, Any],
        *,
        routed_experts: bool = False,
        extra_body: dict[str, Any] | None = None,
    ) -> Generation:
        """Generate one turn of `session` (with `routed_experts`, asking the engines for the
        tokens' routed experts); raises the rule's `StalenessRefusal` when its versions may
        not join the session's earlier ones. `extra_body` fields are added to every request
        of the turn (`return_indexer_topk`); `return_routed_experts` is not one of them, as
        only `routed_experts` leaves it out for a release without it.

        A turn that fails after a drain moved it (the version rule refuses it, its next engine
        fails, its client goes away) loses the drained tokens it held: `on_drained_tokens_lost`
        counts them by the failure's name."""
        gen = Generation()
        try:
            return await self._generate(
                gen,
                session,
                input_ids,
                sampling_params,
                routed_experts=routed_experts,
                extra_body=extra_body,
            )
        except BaseException as exc:
            # Only a resumed turn (partial rollout) holds drained tokens, and it keeps `gen`.
            if gen.drained_tokens:
                self.on_drained_tokens_lost(gen.drained_tokens, _failure_name(exc))
            self._lost(session, len(gen.output_ids), _failure_name(exc))
            raise

    def _lost(self, session: Session, tokens: int, reason: str) -> None:
        if tokens:
            self.on_tokens_lost(tokens, reason, is_evaluation_group(session.instance_id))

    async def _generate(
        self,
        gen: Generation,
        session: Session,
        input_ids: list[int],
        sampling_params: dict[str, Any],
        *,
        routed_experts: bool,
        extra_body: dict[str, Any] | None,
    ) -> Generation:
        rule = rule_for_session(self.rule, session.instance_id)
        resume = rule.resumes_partial_output
        earlier = session.versions_seen
        max_new = sampling_params.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
        min_new = sampling_params.get("min_new_tokens")
        while True:
            done = len(gen.output_ids)
            resuming = resume and done > 0
            if resuming:
                self.gate.hold_resume()
            try:
                await self.gate.wait_open(self.pause_timeout_s)
                target = self.pool.target_version
                if resuming and target is not None:
                    # The rule would refuse the resumed piece after generating it: the engines
                    # route to serve the target version, so refuse before its tokens are spent.
                    rule.check(earlier, [*gen.versions, target])
            finally:
                if resuming:
                    self.gate.resume_sent()
            if not done:
                await self.gate.wait_resumes()  # resumed turns are sent first
                if self.gate.paused:  # a pause came meanwhile: wait for its continue
                    continue
            epoch = self.gate.epoch
            params = sampling_params
            if done:
                params = dict(sampling_params)
                if isinstance(max_new, int):
                    params["max_new_tokens"] = max_new - done
                if isinstance(min_new, int):
                    params["min_new_tokens"] = max(0, min_new - done)
            body: dict[str, Any] = {
                **(extra_body or {}),
                "input_ids": input_ids + gen.output_ids if done else input_ids,
                "sampling_params": params,
                "return_logprob": True,
            }
            if routed_experts:
                body["return_routed_experts"] = True
            adapter = name_adapter(body, target, self.lora_base_version)
            engine, data = await self._call(session, body, received=done)
            piece = stamped(parse_piece(data, engine.url, len(body["input_ids"])), adapter)
            gen.engine_url = engine.url
            cause = interruption(
                piece.finish_reason,
                paused=self.gate.paused or self.gate.epoch != epoch,
                draining=engine.draining,
            )
            preempted = cause is not None
            if cause is Interruption.PAUSE:
                self.on_preempt()
            elif cause is Interruption.DRAIN:
                self.on_drained(engine.url)
            if preempted and not resume:
                gen.add(piece)  # thrown away with the rest: the turn starts over
                self._lost(session, gen.restart(), RESTARTED)
                continue
            gen.add(piece)
            if cause is Interruption.DRAIN:
                gen.drained_tokens += len(piece.output_ids)
                self.on_drained_tokens(engine.url, len(piece.output_ids))
            if resume:
                rule.check(earlier, gen.versions)
            if not preempted:
                break
            gen.preempts += 1
            if isinstance(max_new, int) and len(gen.output_ids) >= max_new:
                gen.finish_reason = {"type": "length", "length": len(gen.output_ids)}
                break
        if not resume:
            rule.check(earlier, gen.versions)
        return gen

    async def _call(
        self, session: Session, body: dict[str, Any], *, received: int
    ) -> tuple[EngineState, Any]:
        """POST /generate to the session's engine, moving to another one when it is down.

        Each engine gets the body its SGLang release takes (`body_for_release`); an engine
        whose release is not known yet is taken as the oldest supported one.
        """
        payloads: dict[str, bytes] = {}
        tried: set[str] = set()
        failures: dict[str, str] = {}
        busy: dict[str, str] = {}
        """Engines that answered 503 (queue full) in this round: skipped, not marked down."""
        backoff = BUSY_BACKOFF_S
        busy_until: float | None = None
        loop = asyncio.get_running_loop()
        while True:
            try:
                engine = self.pool.pick(session.engine_url, exclude=frozenset(tried | set(busy)))
            except ProxyError as exc:
                if busy:
                    # Every engine left is busy: wait, then offer the turn to them again.
                    now = loop.time()
                    if busy_until is None:
                        busy_until = now + self.busy_timeout_s
                    if now >= busy_until:
                        raise ProxyError(
                            503,
                            errors.ENGINE_BUSY,
                            "every inference engine turned the generation away as busy for "
                            f"{self.busy_timeout_s:g}s: "
                            f"{'; '.join(f'{u}: {m}' for u, m in busy.items())}",
                            detail={"engines": dict(busy), "received_tokens": received},
                            headers={"Retry-After": "1"},
                        ) from exc
                    await asyncio.sleep(min(backoff, busy_until - now))
                    backoff = min(backoff * 2, BUSY_BACKOFF_MAX_S)
                    busy.clear()
                    continue
                if not failures:
                    raise
                raise ProxyError(
                    502,
                    errors.ENGINE_FAILED,
                    "inference engine failed during the generation and no other engine could "
                    f"take it over: {'; '.join(f'{u}: {e}' for u, e in failures.items())}",
                    detail={"engines": failures, "received_tokens": received},
                ) from exc
            release = engine.release or SGLANG_MIN_VERSION
            payload = payloads.get(release)
            if payload is None:
                try:
                    shaped = body_for_release(body, release)
                except UnsupportedField as exc:
                    raise invalid(str(exc), exc.field) from None
                payload = payloads[release] = dumps(shaped)
            session.engine_url = engine.url
            engine.inflight += 1
            try:
                reply = await self.connections.request(
                    "POST", engine.url, GENERATE, payload, timeout_s=self.engine_timeout_s
                )
            except ConnectFailed as exc:
                # The request never reached the engine: another one can take it.
                failures[engine.url] = self._down(engine.url, exc)
                tried.add(engine.url)
                self.on_lost(LOST_NOT_SENT)
                self.on_retry()
                continue
            except ReplyTimeout as exc:
                self.on_lost(LOST_TIMEOUT)
                raise ProxyError(
                    504,
                    errors.ENGINE_TIMEOUT,
                    f"engine {engine.url} sent no answer within {self.engine_timeout_s}s",
                    detail={"engine": engine.url},
                ) from exc
            except ConnectionLost as exc:
                failures[engine.url] = self._down(engine.url, exc)
                tried.add(engine.url)
                if received == 0:
                    self.on_lost(LOST_REGENERATED)
                    self.on_retry()
                    continue
                self.on_lost(LOST_AFTER_TOKENS)
                raise ProxyError(
                    502,
                    errors.ENGINE_FAILED,
                    f"engine {engine.url} failed in the middle of a generation "
                    f"({received} tokens already received): {failures[engine.url]}",
                    detail={"engines": failures, "received_tokens": received},
                ) from exc
            finally:
                engine.inflight -= 1
            failure = status_error(reply.status, reply.body, url=engine.url)
            if isinstance(failure, EngineUnavailable):
                # Busy (SGLang: "The request queue is full."), not dead: see the module doc.
                busy[engine.url] = f"HTTP 503: {failure.message}"
                self.on_busy(engine.url)
                continue
            if isinstance(failure, EngineRequestError):
                message = failure.message
                raise invalid(
                    f"engine {engine.url} refused the request: {message}", refused_field(message)
                )
            if failure is not None:
                raise ProxyError(
                    502,
                    errors.ENGINE_ERROR,
                    f"engine {engine.url} answered HTTP {reply.status}: {failure.message}",
                    detail={"engine": engine.url, "status": reply.status},
                )
            try:
                return engine, loads(reply.body)
            except ValueError:
                raise ProxyError(
                    502, errors.ENGINE_ERROR, f"engine {engine.url} answered non-JSON"
                ) from None

    def _down(self, url: str, exc: object) -> str:
        reason = f"{type(exc).__name__}: {exc}" if isinstance(exc, Exception) else str(exc)
        self.pool.mark_down(url, reason)
        return reason


def _failure_name(exc: BaseException) -> str:
    """The name a failed turn's drained tokens are counted under: the proxy's error name
    (`engine_failed`, `partial_rollout_staleness_exceeded`, ...), `cancelled` when the client
    went away, else the exception's type."""
    if isinstance(exc, ProxyError):
        return exc.name
    if isinstance(exc, StalenessRefusal):
        return exc.error_name
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"
    return type(exc).__name__
