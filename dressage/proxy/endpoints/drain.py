"""`POST /dressage/engines/drain {"url", "timeout_s"?, "abort"?}`: take an engine out of routing,
move its generations in flight to other engines, and answer once none is left on it (the drain
itself is described in `dressage.proxy.drain`). `"abort": false` only takes the engine out of
routing and answers at once: with several proxy replicas, the engine's `preStop` hook first
marks it draining on every replica, then drains it on each, since the abort one replica sends
ends the engine's generations of all replicas, and a replica must know them for a drain's to
resume them. `POST /dressage/engines/undrain {"url"}` routes to it
again (a drain started by mistake, a scale-down taken back before the pod went).

The answer: 200 `{"url", "draining": true, "drained": true, "aborted_generations",
"inflight": 0, "waited_s"}`; 504 `drain_timeout` with the same detail when generations are
still in flight after `timeout_s` (default `DEFAULT_DRAIN_TIMEOUT_S`); 404 `not_found` for an
engine the proxy does not have (the answer lists those it has). Draining an engine that is
draining already waits again, so the operator and a `preStop` hook may both drain one.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson

from dressage.asgi import Answer, HttpRequest
from dressage.engine.wire import ABORT_REQUEST
from dressage.proxy import errors
from dressage.proxy.answers import json_response
from dressage.proxy.config import normalize_engine_urls
from dressage.proxy.drain import ABORT_RESEND_S, DEFAULT_DRAIN_TIMEOUT_S, drain_answer
from dressage.proxy.engine_pool import EngineState
from dressage.proxy.errors import ProxyError, invalid
from dressage.proxy.state import ProxyState
from dressage.proxy.upstream import EngineConnections, UpstreamError

log = logging.getLogger("dressage.proxy")

ABORT_ALL_BODY = orjson.dumps({"abort_all": True})
"""SGLang's `AbortReq` aborting every request the engine holds (0.5.2 and 0.5.23
`http_server.abort_request` -> `tokenizer_manager.abort_request(abort_all=True)`)."""
_ABORT_TIMEOUT_S = 10.0
_POLL_S = 0.02
"""How often the drain looks at the engine's count of generations in flight."""


async def drain(state: ProxyState, request: HttpRequest, body: dict[str, Any]) -> Answer:
    url = _engine_url(body)
    timeout_s = body.get("timeout_s", DEFAULT_DRAIN_TIMEOUT_S)
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0:
        raise invalid("timeout_s must be a positive number of seconds", "timeout_s")
    abort = body.get("abort", True)
    if not isinstance(abort, bool):
        raise invalid("abort must be true or false (false: stop routing to it only)", "abort")
    engine = state.pool.start_drain(url)
    if engine is None:
        raise _unknown(state, url)
    if not abort:
        log.info("engine %s marked draining: no new turn goes there", url)
        return json_response(
            {"url": url, "draining": True, "routable": False, "inflight": engine.inflight}
        )
    connections = state.connections
    assert connections is not None, "engines are drained only while the app serves"
    aborted = engine.inflight
    log.info("draining engine %s: %d generation(s) in flight", url, aborted)
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = started + float(timeout_s)
    next_abort = started
    while engine.inflight > 0 and loop.time() < deadline:
        if loop.time() >= next_abort:
            await _abort_all(connections, engine)
            next_abort = loop.time() + ABORT_RESEND_S
        await asyncio.sleep(_POLL_S)
    waited = loop.time() - started
    answer = drain_answer(
        url,
        aborted=aborted,
        remaining=engine.inflight,
        waited_s=waited,
        timeout_s=float(timeout_s),
    )
    log.info("engine %s drained in %.3fs (%d generation(s) moved)", url, waited, aborted)
    return json_response(answer)


async def undrain(state: ProxyState, request: HttpRequest, body: dict[str, Any]) -> Answer:
    url = _engine_url(body)
    engine = state.pool.stop_drain(url)
    if engine is None:
        raise _unknown(state, url)
    log.info("engine %s no longer draining", url)
    return json_response({"url": url, "draining": False, "routable": state.pool.routable(engine)})


def _engine_url(body: dict[str, Any]) -> str:
    url = body.get("url")
    if not isinstance(url, str):
        raise invalid("url is required: the engine's base URL as the proxy lists it", "url")
    try:
        (normalized,) = normalize_engine_urls([url])
    except ValueError as exc:
        raise invalid(str(exc), "url") from None
    return normalized


def _unknown(state: ProxyState, url: str) -> ProxyError:
    return ProxyError(
        404,
        errors.NOT_FOUND,
        f"no engine {url} behind this proxy",
        param="url",
        detail={"engines": state.pool.urls},
    )


async def _abort_all(connections: EngineConnections, engine: EngineState) -> None:
    """Abort everything the engine holds; a failure is logged (an engine that is already gone
    fails its requests by itself, and they are retried as a crash's)."""
    try:
        reply = await connections.request(
            "POST",
            engine.url,
            ABORT_REQUEST,
            ABORT_ALL_BODY,
            timeout_s=_ABORT_TIMEOUT_S,
            fresh=True,
        )
    except UpstreamError as exc:
        log.warning("draining %s: the abort failed: %s: %s", engine.url, type(exc).__name__, exc)
        return
    if reply.status >= 400:
        text = reply.body[:200].decode(errors="replace")
        log.warning("draining %s: the abort answered HTTP %d: %s", engine.url, reply.status, text)
