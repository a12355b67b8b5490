"""The rollout proxy's HTTP API (an ASGI app, see `dressage.asgi`; `create_app(config)`).

Agents never talk to engines directly: every generation goes through here, which keeps one
session per trajectory, records the version of every generated token, resumes generations
interrupted by weight updates (partial rollout) and enforces the version-span limit.

Sessions. A session is one trajectory. Its id comes from the `X-Session-Id` header, else the
body field `session_id` (`/generate`), else `user` or `metadata.session_id` (chat), else the
path prefix `/s/{session_id}/...` (for agents whose only setting is a base URL:
`http://proxy/s/<id>/v1`). `X-Instance-Id` (body `instance_id`, chat `metadata.instance_id`)
names the prompt instance (the GRPO group). A session is created by its first request.

Endpoints (JSON bodies; errors are `{"error": {"type", "code", "message", "param", "detail"}}`
with the stable names of `dressage.proxy.errors`):

`POST /generate` (whitebox agents): SGLang's body `{"input_ids": [...], "sampling_params":
{...}, "return_logprob": bool}`. `input_ids` must extend the session's current segment (its
prompt, the model's outputs and what was appended after them) to continue it; anything else
starts a new segment. Answers SGLang's response (`text`, `output_ids`, `meta_info` with
`finish_reason`, `weight_version`, `weight_versions` spans, `output_token_logprobs`,
`prompt_tokens`, `completion_tokens`, and `e2e_latency`, the seconds the proxy took for the
request) plus `"dressage": {"session_id", "instance_id", "segment_index", "new_segment" (null
or why a segment started), "versions" (one per output token), "preempts", "engine",
"engine_latency" (the engines' own `e2e_latency` summed over the turn, null when they do not
report it)}`. The difference, per model turn, is the histogram
`dressage_proxy_generation_overhead_seconds`.

`POST /v1/chat/completions`, `POST /s/{session_id}/v1/chat/completions` (OpenAI-compatible,
`stream` true or false; `n` must be 1; needs `--model`), `GET /v1/models`,
`GET /s/{session_id}/v1/models`. Messages are rendered with the model's chat template
incrementally (see `dressage.proxy.chat`): user and tool tokens get loss mask 0, model tokens 1.
A history rewrite or a change of `tools` starts a new segment. A streamed answer arrives as
one content chunk once the turn is generated (the turn may be resumed across weight updates).

`POST /sessions` `{"session_id", "instance_id"}` creates a session ahead of its agent.
`GET /sessions/{id}` summarises it. `POST /sessions/{id}/finalize` `{"reward": float|null}`
closes it and queues its segment records. `DELETE /sessions/{id}` forgets it, records included.
`GET /segments?instance_id=I&drain=true|false` returns `{"segments": [record, ...]}`, the
records of finalized sessions (of instance I, or all), and with `drain=true` (the default)
removes them. Records are described in `dressage.proxy.records`.

`POST /pause_generation` `{"mode": "abort"|"in_place"|"retract"}` (default `abort`) and
`POST /continue_generation`, for the trainer around a weight update. Pause closes the proxy's
gate (new generations wait) and pauses every engine; with mode `abort` the engines abort
in-flight generations, which then wait for continue. With `--dressage-partial-rollout` each
resumes from its partial output (prompt + generated tokens, remaining budget) and its tokens
keep their own versions; without it the partial output is discarded and the turn is generated
again from its prompt after continue. Each interruption counts as a preempt.
Answers `{"paused": bool, "epoch": n, "engines": {url: "ok" | error}}`; 502 `engine_error`
when an engine did not take the command.

`GET /health` (no auth): engines, pause state, sessions. `GET /metrics` (no auth): Prometheus.

Refusals (the trajectory is stopped; any later generation of it gets the same answer):

- 502 `partial_rollout_staleness_exceeded`, `detail = {"versions", "version_span",
  "version_switches", "max_preempts", "max_version_span"}`: with
  `--max-partial-rollout-preempts N`, the session's earlier response versions merged with the
  turn's would switch versions more than N times.
- 409 `version_changed_without_partial_rollout`, `detail = {"versions", "session_versions",
  "candidate_versions"}`: without partial rollout, the turn came from another weight version
  than the trajectory's earlier turns.

Other errors: 400 `invalid_json`, `invalid_request` (naming the field), `missing_session_id`;
401 `unauthorized`; 404 `not_found`; 405 `method_not_allowed`; 409 `session_busy` (one
generation at a time per session), `session_finalized`; 413 `request_too_large`; 429
`too_many_requests` (more than `--max-concurrency` generations in flight); 502 `engine_failed`
(an engine died mid-turn after tokens were received, or no engine could take over),
`engine_error`; 503 `no_healthy_engine`, `pause_timeout`; 504 `engine_timeout`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from dressage.asgi import (
    Answer,
    App,
    BodyTooLarge,
    ClientDisconnected,
    HttpRequest,
    Route,
)
from dressage.proxy import errors
from dressage.proxy.chat import (
    ChatState,
    ChatTokenizer,
    after_reply,
    canonical_messages,
    load_chat_tokenizer,
    plan_chat_turn,
)
from dressage.proxy.config import ProxyConfig
from dressage.proxy.errors import ProxyError, invalid
from dressage.proxy.generation import Generation, Generator, PauseGate, dumps, loads
from dressage.proxy.metrics import ProxyMetrics
from dressage.proxy.records import session_records
from dressage.proxy.routing import EnginePool
from dressage.proxy.sessions import Session, SessionStore, TurnPlan
from dressage.proxy.staleness import (
    PartialRolloutStalenessExceeded,
    VersionChangedWithoutPartialRollout,
    _raise_if_partial_version_span_exceeded,
    raise_if_version_changed,
)
from dressage.proxy.upstream import EngineConnections, UpstreamError
from dressage.rollout.versions import version_span

log = logging.getLogger("dressage.proxy")

_GENERATE_FIELDS = frozenset(
    {
        "input_ids",
        "sampling_params",
        "return_logprob",
        "session_id",
        "instance_id",
        "stream",
        "rid",
        "log_metrics",
        "logprob_start_len",
        "return_text_in_logprobs",
    }
)
_CHAT_DEFAULT_MAX_TOKENS = 256
Handler = Callable[[HttpRequest], Awaitable[Answer]]
"""A proxy endpoint: every answer it gives is complete (streams are sent as one chunk)."""


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Answer:
    return Answer(dumps(data), status, headers=headers)


def error_response(exc: ProxyError) -> Answer:
    return json_response(exc.body(), exc.status, exc.headers)


@dataclass
class ProxyState:
    """Everything one app instance owns (no module globals)."""

    config: ProxyConfig
    clock: Callable[[], float]
    store: SessionStore
    pool: EnginePool
    gate: PauseGate
    metrics: ProxyMetrics
    tokenizer: ChatTokenizer | None
    connections: EngineConnections | None = None
    generator: Generator | None = None
    inflight: int = 0
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


def create_app(
    config: ProxyConfig,
    *,
    clock: Callable[[], float] = time.monotonic,
    tokenizer: ChatTokenizer | None = None,
) -> App:
    """The proxy app. `clock` drives session expiry; `tokenizer` overrides `config.model`."""
    if tokenizer is None and config.model:
        tokenizer = load_chat_tokenizer(config.model)
    store = SessionStore(config.session_ttl_s)
    state = ProxyState(
        config=config,
        clock=clock,
        store=store,
        pool=EnginePool(config.engine_urls),
        gate=PauseGate(),
        metrics=ProxyMetrics(lambda: float(len(store))),
        tokenizer=tokenizer,
    )
    for engine in state.pool.engines:
        state.metrics.engine_healthy.labels(engine.url).set(1)

    @contextlib.asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        connections = EngineConnections()
        state.connections = connections
        state.generator = Generator(
            connections=connections,
            pool=state.pool,
            gate=state.gate,
            partial_rollout=config.partial_rollout,
            engine_timeout_s=config.engine_timeout_s,
            pause_timeout_s=config.pause_timeout_s,
            on_preempt=state.metrics.preempts.inc,
            on_retry=state.metrics.engine_retries.inc,
        )
        state.tasks = [
            asyncio.create_task(_health_loop(state)),
            asyncio.create_task(_expiry_loop(state)),
        ]
        try:
            yield
        finally:
            for task in state.tasks:
                task.cancel()
            await asyncio.gather(*state.tasks, return_exceptions=True)
            await connections.close()

    h = _Handlers(state)
    routes = [
        Route("/health", h.wrap("health", h.health, auth=False), methods=("GET",)),
        Route("/metrics", h.wrap("metrics", h.metrics_endpoint, auth=False), methods=("GET",)),
        Route("/generate", h.wrap("generate", h.generate, limited=True), methods=("POST",)),
        Route(
            "/v1/chat/completions",
            h.wrap("chat_completions", h.chat_completions, limited=True),
            methods=("POST",),
        ),
        Route(
            "/s/{session_id}/v1/chat/completions",
            h.wrap("chat_completions", h.chat_completions, limited=True),
            methods=("POST",),
        ),
        Route("/v1/models", h.wrap("models", h.models), methods=("GET",)),
        Route("/s/{session_id}/v1/models", h.wrap("models", h.models), methods=("GET",)),
        Route("/sessions", h.wrap("sessions", h.create_session), methods=("POST",)),
        Route("/sessions/{session_id}", h.wrap("sessions", h.get_session), methods=("GET",)),
        Route("/sessions/{session_id}", h.wrap("sessions", h.delete_session), methods=("DELETE",)),
        Route(
            "/sessions/{session_id}/finalize",
            h.wrap("finalize", h.finalize),
            methods=("POST",),
        ),
        Route("/segments", h.wrap("segments", h.segments), methods=("GET",)),
        Route("/pause_generation", h.wrap("pause", h.pause), methods=("POST",)),
        Route("/continue_generation", h.wrap("continue", h.continue_), methods=("POST",)),
    ]

    def no_route(request: HttpRequest, known_path: bool) -> Answer:
        if known_path:
            err = ProxyError(
                405, errors.METHOD_NOT_ALLOWED, f"{request.method} is not allowed on {request.path}"
            )
        else:
            err = ProxyError(404, errors.NOT_FOUND, f"no endpoint {request.path}")
        return error_response(err)

    return App(routes, fallback=no_route, lifespan=lifespan)


async def _health_loop(state: ProxyState) -> None:
    """Probe every engine's `/health`; an engine is routed to only while it answers 200."""
    assert state.connections is not None
    connections = state.connections
    interval = state.config.health_interval_s

    async def probe(url: str) -> None:
        try:
            reply = await connections.request(
                "GET", url, "/health", timeout_s=min(5.0, interval * 2)
            )
            ok = reply.status == 200
            reason = f"health check answered HTTP {reply.status}"
        except UpstreamError as exc:
            ok, reason = False, f"health check failed: {type(exc).__name__}: {exc}"
        if ok:
            state.pool.mark_up(url)
        elif state.pool[url].healthy or state.pool[url].last_error != reason:
            state.pool.mark_down(url, reason)
        state.metrics.engine_healthy.labels(url).set(1 if ok else 0)

    while True:
        await asyncio.gather(*(probe(e.url) for e in state.pool.engines))
        await asyncio.sleep(interval)


async def _expiry_loop(state: ProxyState) -> None:
    interval = min(30.0, max(0.05, state.config.session_ttl_s / 4))
    while True:
        await asyncio.sleep(interval)
        expired = state.store.expire(state.clock())
        if expired:
            state.metrics.expired_sessions.inc(len(expired))


class _Handlers:
    """Request handlers over one `ProxyState`."""

    def __init__(self, state: ProxyState) -> None:
        self.s = state
        self.config = state.config
        token = state.config.auth_token
        self._auth = f"Bearer {token}".encode() if token else None

    # --- plumbing -----------------------------------------------------------------------------

    def wrap(
        self, endpoint: str, fn: Handler, *, auth: bool = True, limited: bool = False
    ) -> Handler:
        metrics = self.s.metrics
        requests = metrics.requests
        duration = metrics.duration.labels(endpoint)
        max_inflight = self.config.max_concurrency
        state = self.s
        answered: dict[int, Any] = {}
        """The request counter of each status code of this endpoint (labels looked up once)."""

        async def handler(request: HttpRequest) -> Answer:
            start = time.perf_counter()
            counted = False
            try:
                if auth and self._auth is not None:
                    self._check_auth(request)
                if limited:
                    if state.inflight >= max_inflight:
                        raise ProxyError(
                            429,
                            errors.TOO_MANY_REQUESTS,
                            f"{state.inflight} generations in flight, the limit is "
                            f"{max_inflight} (--max-concurrency); retry later",
                            headers={"Retry-After": "1"},
                        )
                    state.inflight += 1
                    metrics.inflight.inc()
                    counted = True
                response = await fn(request)
            except ProxyError as exc:
                response = error_response(exc)
            except Exception:
                log.exception("unhandled error on %s %s", request.method, request.path)
                response = error_response(
                    ProxyError(500, errors.INTERNAL_ERROR, "internal proxy error (logged)")
                )
            finally:
                if counted:
                    state.inflight -= 1
                    metrics.inflight.dec()
            counter = answered.get(response.status)
            if counter is None:
                counter = answered[response.status] = requests.labels(
                    endpoint, str(response.status)
                )
            counter.inc()
            duration.observe(time.perf_counter() - start)
            return response

        return handler

    def _check_auth(self, request: HttpRequest) -> None:
        assert self._auth is not None
        given = request.headers.get("authorization", "").encode()
        if not hmac.compare_digest(given, self._auth):
            raise ProxyError(
                401,
                errors.UNAUTHORIZED,
                "missing or wrong bearer token (Authorization: Bearer <token>)",
                headers={"WWW-Authenticate": "Bearer"},
            )

    async def read_json(self, request: HttpRequest, *, optional: bool = False) -> dict[str, Any]:
        limit = self.config.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None:
            try:
                too_large = int(declared) > limit
            except ValueError:
                raise invalid("Content-Length header is not an integer") from None
            if too_large:
                raise _too_large(int(declared), limit)
        try:
            body = await request.body(limit)
        except BodyTooLarge as exc:
            raise _too_large(exc.size, limit) from None
        except ClientDisconnected as exc:
            raise invalid(str(exc)) from None
        if not body.strip():
            if optional:
                return {}
            raise ProxyError(400, errors.INVALID_JSON, "request body is empty; send a JSON object")
        try:
            data = loads(body)
        except ValueError as exc:
            raise ProxyError(400, errors.INVALID_JSON, f"request body is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ProxyError(400, errors.INVALID_JSON, "request body must be a JSON object")
        return data

    def _session_ids(
        self, request: HttpRequest, body: dict[str, Any], *fallbacks: tuple[str, ...]
    ) -> tuple[str, str | None]:
        session_id: object = request.headers.get("x-session-id") or body.get("session_id")
        instance_id: object = request.headers.get("x-instance-id") or body.get("instance_id")
        for path in fallbacks:
            value: object = body
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            if path[-1] == "instance_id":
                instance_id = instance_id or value
            else:
                session_id = session_id or value
        session_id = session_id or request.path_params.get("session_id")
        if not session_id:
            raise ProxyError(
                400,
                errors.MISSING_SESSION_ID,
                "no session id: send the X-Session-Id header (one id per trajectory)",
                param="X-Session-Id",
            )
        if not isinstance(session_id, str) or len(session_id) > 256:
            raise invalid("session id must be a string of at most 256 characters", "session_id")
        if instance_id is not None and (not isinstance(instance_id, str) or len(instance_id) > 256):
            raise invalid("instance id must be a string of at most 256 characters", "instance_id")
        return session_id, instance_id

    # --- generation ---------------------------------------------------------------------------

    async def _run_turn(
        self,
        session: Session,
        input_ids: list[int],
        sampling_params: dict[str, Any],
        *,
        force_new_segment: str | None = None,
    ) -> tuple[TurnPlan, Generation, int]:
        """Plan, generate, check and record one turn; returns the plan, the generation and the
        segment index it was recorded in."""
        s = self.s
        config = self.config
        assert s.generator is not None
        plan = session.begin_turn(input_ids, s.clock(), force_new_segment=force_new_segment)
        earlier = session.versions_seen

        def check(candidate: list[str | None]) -> None:
            if config.partial_rollout:
                _raise_if_partial_version_span_exceeded(
                    earlier, candidate, config.max_partial_rollout_preempts
                )
            else:
                raise_if_version_changed(earlier, candidate)

        started = time.perf_counter()
        try:
            gen = await s.generator.run(session, input_ids, sampling_params, check)
        except (PartialRolloutStalenessExceeded, VersionChangedWithoutPartialRollout) as exc:
            refusal = ProxyError(exc.status, exc.error_name, str(exc), detail=exc.detail)
            session.refuse(refusal, s.clock())
            s.metrics.refusals.labels(exc.error_name).inc()
            raise refusal from None
        except BaseException:
            session.end_turn(s.clock())
            raise
        if gen.engine_latency is not None and not gen.preempts:
            # Interrupted turns are left out: their time includes the weight-update pause.
            overhead = time.perf_counter() - started - gen.engine_latency
            s.metrics.generation_overhead.observe(max(0.0, overhead))
        segment = session.commit_turn(
            plan, gen.output_ids, gen.logprobs, gen.versions, s.clock(), preempts=gen.preempts
        )
        return plan, gen, segment.index

    async def generate(self, request: HttpRequest) -> Answer:
        started = time.perf_counter()
        body = await self.read_json(request)
        unknown = sorted(set(body) - _GENERATE_FIELDS)
        if unknown:
            raise invalid(f"unknown field {unknown[0]!r} in /generate body", unknown[0])
        input_ids = body.get("input_ids")
        if input_ids is None:
            raise invalid("input_ids is required: the proxy records token ids", "input_ids")
        if not isinstance(input_ids, list) or not input_ids or not _are_token_ids(input_ids):
            raise invalid(
                "input_ids must be a non-empty list of token ids (ints >= 0)", "input_ids"
            )
        params = body.get("sampling_params") or {}
        if not isinstance(params, dict):
            raise invalid("sampling_params must be an object", "sampling_params")
        if body.get("stream"):
            raise invalid("stream is not supported on /generate", "stream")
        _check_budget(params.get("max_new_tokens"), "sampling_params.max_new_tokens")
        session_id, instance_id = self._session_ids(request, body)
        session = self.s.store.get_or_create(session_id, instance_id, self.s.clock())
        plan, gen, segment_index = await self._run_turn(session, input_ids, params)
        meta: dict[str, Any] = {
            "id": f"dressage-{uuid.uuid4().hex}",
            "finish_reason": gen.finish_reason,
            "prompt_tokens": len(input_ids),
            "completion_tokens": len(gen.output_ids),
            "cached_tokens": gen.cached_tokens,
            "weight_version": gen.weight_version,
            "weight_versions": gen.version_spans(),
            "e2e_latency": time.perf_counter() - started,
        }
        if body.get("return_logprob"):
            meta["output_token_logprobs"] = gen.raw_logprobs
        return json_response(
            {
                "text": "".join(gen.texts),
                "output_ids": gen.output_ids,
                "meta_info": meta,
                "dressage": {
                    "session_id": session.session_id,
                    "instance_id": session.instance_id,
                    "segment_index": segment_index,
                    "new_segment": plan.new_segment,
                    "versions": gen.versions,
                    "preempts": gen.preempts,
                    "engine": gen.engine_url,
                    "engine_latency": gen.engine_latency,
                },
            }
        )

    async def chat_completions(self, request: HttpRequest) -> Answer:
        tok = self.s.tokenizer
        body = await self.read_json(request)
        if tok is None:
            raise ProxyError(
                404,
                errors.NOT_FOUND,
                "/v1/chat/completions needs the proxy to be started with --model",
            )
        messages = canonical_messages(body.get("messages"))
        tools = body.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise invalid("tools must be a list", "tools")
        n = body.get("n", 1)
        if n not in (1, None):
            raise invalid("n must be 1: one trajectory per session", "n")
        params = _chat_sampling_params(body, tok.stop_token_ids)
        stream = bool(body.get("stream", False))
        session_id, instance_id = self._session_ids(
            request, body, ("metadata", "session_id"), ("user",), ("metadata", "instance_id")
        )
        session = self.s.store.get_or_create(session_id, instance_id, self.s.clock())
        session.check_can_generate()
        state = session.chat if isinstance(session.chat, ChatState) else None
        current = session.current.tokens() if session.current is not None else None
        turn = plan_chat_turn(tok, state, current, messages, tools)
        plan, gen, segment_index = await self._run_turn(
            session, turn.input_ids, params, force_new_segment=turn.new_segment
        )
        content = tok.decode(gen.output_ids, skip_special_tokens=True)
        reply = {"role": "assistant", "content": content}
        session.chat = after_reply(tok, turn, reply, gen.output_ids)
        finish = "length" if gen.finish_reason.get("type") == "length" else "stop"
        created = int(time.time())
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        model = body.get("model") or self.config.served_model_name
        usage = {
            "prompt_tokens": len(turn.input_ids),
            "completion_tokens": len(gen.output_ids),
            "total_tokens": len(turn.input_ids) + len(gen.output_ids),
        }
        extra = {
            "session_id": session.session_id,
            "segment_index": segment_index,
            "new_segment": plan.new_segment,
            "versions": gen.versions,
            "preempts": gen.preempts,
            "output_ids": gen.output_ids,
        }
        logprobs: dict[str, Any] | None = None
        if body.get("logprobs"):
            logprobs = {
                "content": [
                    {"token": tok.decode([t], skip_special_tokens=False), "logprob": lp,
                     "bytes": None, "top_logprobs": []}
                    for t, lp in zip(gen.output_ids, gen.logprobs, strict=True)
                ]
            }  # fmt: skip
        if not stream:
            return json_response(
                {
                    "id": completion_id,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": reply,
                            "finish_reason": finish,
                            "logprobs": logprobs,
                        }
                    ],
                    "usage": usage,
                    "dressage": extra,
                }
            )
        base = {"id": completion_id, "object": "chat.completion.chunk", "created": created,
                "model": model}  # fmt: skip
        chunks = [
            base | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                 "finish_reason": None}]},
            base | {"choices": [{"index": 0, "delta": {"content": content}, "logprobs": logprobs,
                                 "finish_reason": None}]},
            base | {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
                    "usage": usage, "dressage": extra},
        ]  # fmt: skip
        payload = b"".join(b"data: " + dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
        return Answer(payload, content_type="text/event-stream; charset=utf-8", stream=True)

    async def models(self, request: HttpRequest) -> Answer:
        return json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.config.served_model_name,
                        "object": "model",
                        "created": 0,
                        "owned_by": "dressage",
                    }
                ],
            }
        )

    # --- sessions and records -----------------------------------------------------------------

    def _session(self, request: HttpRequest) -> Session:
        session_id = request.path_params["session_id"]
        session = self.s.store.get(session_id)
        if session is None:
            raise ProxyError(404, errors.NOT_FOUND, f"no open session {session_id!r}")
        return session

    async def create_session(self, request: HttpRequest) -> Answer:
        body = await self.read_json(request)
        session_id, instance_id = self._session_ids(request, body)
        session = self.s.store.get_or_create(session_id, instance_id, self.s.clock())
        return json_response(session.summary(), 201)

    async def get_session(self, request: HttpRequest) -> Answer:
        return json_response(self._session(request).summary())

    async def delete_session(self, request: HttpRequest) -> Answer:
        session_id = request.path_params["session_id"]
        if not self.s.store.delete(session_id):
            raise ProxyError(404, errors.NOT_FOUND, f"no session {session_id!r}")
        return json_response({"deleted": session_id})

    async def finalize(self, request: HttpRequest) -> Answer:
        body = await self.read_json(request, optional=True)
        reward = body.get("reward")
        if reward is not None and (isinstance(reward, bool) or not isinstance(reward, int | float)):
            raise invalid("reward must be a number or null", "reward")
        session = self._session(request)
        if session.busy:
            raise ProxyError(
                409,
                errors.SESSION_BUSY,
                f"session {session.session_id!r} has a generation in flight; finalize after it",
            )
        session.close()
        records = session_records(
            session,
            reward=None if reward is None else float(reward),
            record_token_versions=self.config.record_token_versions,
            mask_nonlast_versions=self.config.mask_nonlast_version_tokens,
        )
        for segment in session.segments:
            self.s.metrics.version_span.observe(version_span(segment.versions))
        self.s.store.finalize(session.session_id, records, self.s.clock())
        return json_response(
            {
                "session_id": session.session_id,
                "instance_id": session.instance_id,
                "segments": len(records),
                "status": "refused" if session.refusal is not None else "finished",
            }
        )

    async def segments(self, request: HttpRequest) -> Answer:
        instance_id = request.query_params.get("instance_id")
        drain_text = request.query_params.get("drain", "true").lower()
        if drain_text not in ("true", "false", "1", "0"):
            raise invalid("drain must be true or false", "drain")
        records = self.s.store.read_finished(instance_id, drain=drain_text in ("true", "1"))
        return json_response({"segments": records})

    # --- weight updates -----------------------------------------------------------------------

    async def pause(self, request: HttpRequest) -> Answer:
        body = await self.read_json(request, optional=True)
        mode = body.get("mode", "abort")
        if mode not in ("abort", "in_place", "retract"):
            raise invalid("mode must be abort, in_place or retract", "mode")
        self.s.gate.pause()
        results = await self._broadcast("/pause_generation", {"mode": mode})
        return self._control_answer(results)

    async def continue_(self, request: HttpRequest) -> Answer:
        results = await self._broadcast("/continue_generation", {})
        self.s.gate.resume()
        return self._control_answer(results)

    async def _broadcast(self, path: str, body: dict[str, Any]) -> dict[str, str]:
        connections = self.s.connections
        assert connections is not None

        async def send(url: str) -> str:
            try:
                reply = await connections.request("POST", url, path, dumps(body), timeout_s=30.0)
            except UpstreamError as exc:
                return f"{type(exc).__name__}: {exc}"
            if reply.status >= 400:
                return f"HTTP {reply.status}: {reply.body[:200].decode(errors='replace')}"
            return "ok"

        urls = [e.url for e in self.s.pool.engines]
        answers = await asyncio.gather(*(send(url) for url in urls))
        return dict(zip(urls, answers, strict=True))

    def _control_answer(self, results: dict[str, str]) -> Answer:
        data = {"paused": self.s.gate.paused, "epoch": self.s.gate.epoch, "engines": results}
        failed = {url: r for url, r in results.items() if r != "ok"}
        if failed:
            err = ProxyError(
                502,
                errors.ENGINE_ERROR,
                f"{len(failed)} engine(s) did not take the command",
                detail=data,
            )
            return error_response(err)
        return json_response(data)

    # --- health -------------------------------------------------------------------------------

    async def health(self, request: HttpRequest) -> Answer:
        healthy = bool(self.s.pool.healthy())
        return json_response(
            {
                "status": "ok" if healthy else "no_healthy_engine",
                "engines": self.s.pool.snapshot(),
                "paused": self.s.gate.paused,
                "active_sessions": len(self.s.store),
                "finished_sessions": self.s.store.finished_count,
                "inflight": self.s.inflight,
            },
            200 if healthy else 503,
        )

    async def metrics_endpoint(self, request: HttpRequest) -> Answer:
        return Answer(
            self.s.metrics.render(), content_type="text/plain; version=0.0.4; charset=utf-8"
        )


def _too_large(size: int, limit: int) -> ProxyError:
    return ProxyError(
        413,
        errors.REQUEST_TOO_LARGE,
        f"request body of {size} bytes exceeds the limit of {limit} bytes (--max-body-bytes)",
    )


def _are_token_ids(values: list[Any]) -> bool:
    """Whether every value is an int >= 0 (a bool is not a token id).

    Two passes in C (the type of every value, then the smallest) instead of a Python loop per
    token: prompts run to thousands of tokens and this runs on every turn.
    """
    return list(map(type, values)).count(int) == len(values) and min(values) >= 0


def _check_budget(value: object, name: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise invalid(f"{name} must be an integer >= 0", name)


def _chat_sampling_params(body: dict[str, Any], stop_token_ids: list[int]) -> dict[str, Any]:
    """SGLang sampling params of an OpenAI chat request."""
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is None:
        max_tokens = _CHAT_DEFAULT_MAX_TOKENS
    _check_budget(max_tokens, "max_tokens")
    params: dict[str, Any] = {"max_new_tokens": max_tokens}
    for src, dst in (("temperature", "temperature"), ("top_p", "top_p")):
        value = body.get(src)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise invalid(f"{src} must be a number", src)
            params[dst] = float(value)
    stop = body.get("stop")
    if stop is not None:
        if isinstance(stop, str):
            stop = [stop]
        if not isinstance(stop, list) or not all(isinstance(x, str) for x in stop):
            raise invalid("stop must be a string or a list of strings", "stop")
        params["stop"] = stop
    seed = body.get("seed")
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise invalid("seed must be an integer", "seed")
        params["sampling_seed"] = seed
    if stop_token_ids:
        params["stop_token_ids"] = list(stop_token_ids)
    return params
