"""`create_app(config)`: the proxy's ASGI app, its route table and its lifespan.

The lifespan opens the engine connections, builds the generator with the config's version
rule (`dressage.proxy.span_rule.version_rule`) and runs the background loops; leaving it stops
the loops and closes the connections. The HTTP API is documented in `dressage.proxy.server`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator, Callable

from dressage.asgi import Answer, App, HttpRequest, Route
from dressage.proxy import errors
from dressage.proxy.answers import error_response
from dressage.proxy.background import expiry_loop, health_loop
from dressage.proxy.config import ProxyConfig, read_engine_urls
from dressage.proxy.endpoints import control, drain, router, sessions, sglang, weights
from dressage.proxy.engine_pool import EnginePool
from dressage.proxy.errors import ProxyError
from dressage.proxy.generation import Generator, PauseGate
from dressage.proxy.metrics import ProxyMetrics
from dressage.proxy.middleware import Body, EndpointFn, Handler, endpoint
from dressage.proxy.openai import endpoint as openai_chat
from dressage.proxy.openai.chat import ChatTokenizer, load_chat_tokenizer
from dressage.proxy.sessions import SessionStore
from dressage.proxy.span_rule import version_rule
from dressage.proxy.state import ProxyState
from dressage.proxy.upstream import EngineConnections

GET, POST, DELETE = ("GET",), ("POST",), ("DELETE",)


def create_app(
    config: ProxyConfig,
    *,
    clock: Callable[[], float] = time.monotonic,
    tokenizer: ChatTokenizer | None = None,
) -> App:
    """The proxy app. `clock` drives session expiry; `tokenizer` overrides `config.model`."""
    if tokenizer is None and config.model:
        tokenizer = load_chat_tokenizer(
            config.model,
            reasoning_parser=config.reasoning_parser,
            tool_call_parser=config.tool_call_parser,
        )
    store = SessionStore(config.session_ttl_s, config.max_sessions, config.session_evict_idle_s)
    pool = EnginePool(initial_engine_urls(config))
    state = ProxyState(
        config=config,
        clock=clock,
        store=store,
        pool=pool,
        gate=PauseGate(),
        metrics=ProxyMetrics(
            lambda: float(len(store)),
            pool.health_counts,
            lambda: len(pool.engines),
            config.per_engine_metrics_max_engines,
        ),
    )
    store.on_evict = state.metrics.evicted_sessions.inc
    state.pool.adapters = config.lora_base_version is not None
    for engine in state.pool.engines:
        state.metrics.engine_health(engine.url, True)
    rule = version_rule(config)

    @contextlib.asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        connections = EngineConnections()
        state.connections = connections
        state.generator = Generator(
            connections=connections,
            pool=state.pool,
            gate=state.gate,
            rule=rule,
            engine_timeout_s=config.engine_timeout_s,
            pause_timeout_s=config.pause_timeout_s,
            lora_base_version=config.lora_base_version,
            on_preempt=state.metrics.preempts.inc,
            on_retry=state.metrics.engine_retries.inc,
            on_busy=state.metrics.engine_refused_busy,
            on_drained=lambda url: state.metrics.drained_turns.inc(),
            on_drained_tokens=lambda url, tokens: state.metrics.drained_tokens.inc(tokens),
            on_drained_tokens_lost=lambda tokens, reason: state.metrics.drained_tokens_lost.labels(
                reason
            ).inc(tokens),
            on_lost=lambda reason: state.metrics.engine_failed_turns.labels(reason).inc(),
            on_tokens_lost=lambda tokens, reason, evaluation: state.metrics.lost_tokens.labels(
                reason, "true" if evaluation else "false"
            ).inc(tokens),
            busy_timeout_s=config.engine_busy_timeout_s,
        )
        state.tasks = [
            asyncio.create_task(health_loop(state, connections)),
            asyncio.create_task(expiry_loop(state)),
        ]
        try:
            yield
        finally:
            for task in state.tasks:
                task.cancel()
            await asyncio.gather(*state.tasks, return_exceptions=True)
            await connections.close()

    return App(_routes(state, tokenizer), fallback=_no_route, lifespan=lifespan)


def initial_engine_urls(config: ProxyConfig) -> list[str]:
    """The engines the proxy starts with: `engine_urls`, else those in `engine_urls_file`
    (which must be readable at startup; ValueError naming it otherwise)."""
    if config.engine_urls_file is None:
        return list(config.engine_urls)
    try:
        return read_engine_urls(config.engine_urls_file)
    except OSError as exc:
        raise ValueError(f"engine_urls_file (--engine-urls-file): cannot read it: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"engine_urls_file (--engine-urls-file): {exc}") from None


def _routes(state: ProxyState, tokenizer: ChatTokenizer | None) -> list[Route]:
    """The route table: path, endpoint (metered under its name) and methods. The OpenAI
    layer's chat endpoint gets the chat template's `tokenizer` (None without `--model`: it
    answers 404)."""

    def on(
        name: str,
        fn: EndpointFn,
        *,
        body: Body = Body.NONE,
        auth: bool = True,
        limited: bool = False,
    ) -> Handler:
        return endpoint(state, name, fn, body=body, auth=auth, limited=limited)

    generate = on("generate", sglang.generate, body=Body.JSON, limited=True)
    chat_completions = functools.partial(openai_chat.chat_completions, tokenizer)
    chat = on("chat_completions", chat_completions, body=Body.JSON, limited=True)
    models = on("models", openai_chat.models)
    return [
        Route("/health", on("health", control.health, auth=False), GET),
        Route("/metrics", on("metrics", control.metrics, auth=False), GET),
        Route("/generate", generate, POST),
        Route("/v1/chat/completions", chat, POST),
        Route("/s/{session_id}/v1/chat/completions", chat, POST),
        Route("/v1/models", models, GET),
        Route("/s/{session_id}/v1/models", models, GET),
        Route("/sessions", on("sessions", sessions.create_session, body=Body.JSON), POST),
        Route("/sessions/{session_id}", on("sessions", sessions.get_session), GET),
        Route("/sessions/{session_id}", on("sessions", sessions.delete_session), DELETE),
        Route(
            "/sessions/{session_id}/finalize",
            on("finalize", sessions.finalize, body=Body.OPTIONAL_JSON),
            POST,
        ),
        Route("/segments", on("segments", sessions.segments), GET),
        Route("/pause_generation", on("pause", control.pause, body=Body.OPTIONAL_JSON), POST),
        Route(
            "/continue_generation",
            on("continue", control.continue_generation, body=Body.OPTIONAL_JSON),
            POST,
        ),
        Route("/workers", on("workers", router.list_workers), GET),
        Route("/workers", on("workers", router.add_worker, body=Body.JSON), POST),
        Route("/workers/{worker_id}", on("workers", router.remove_worker), DELETE),
        Route(
            "/abort_request",
            on("abort_request", router.abort_request, body=Body.OPTIONAL_JSON),
            POST,
        ),
        Route("/dressage/engines", on("engines", control.engines), GET),
        Route("/dressage/engines/drain", on("drain", drain.drain, body=Body.JSON), POST),
        Route("/dressage/engines/undrain", on("drain", drain.undrain, body=Body.JSON), POST),
        Route(
            "/dressage/weight_version",
            on("weight_version", control.set_weight_version, body=Body.JSON),
            POST,
        ),
        Route(
            "/dressage/weights/update_from_disk",
            on("update_from_disk", weights.update_from_disk, body=Body.JSON),
            POST,
        ),
    ]


def _no_route(request: HttpRequest, known_path: bool) -> Answer:
    if known_path:
        err = ProxyError(
            405, errors.METHOD_NOT_ALLOWED, f"{request.method} is not allowed on {request.path}"
        )
    else:
        err = ProxyError(404, errors.NOT_FOUND, f"no endpoint {request.path}")
    return error_response(err)
