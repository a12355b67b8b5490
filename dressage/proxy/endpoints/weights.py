"""`POST /dressage/weights/update_from_disk`: load a checkpoint on the proxy's engines, from the
proxy, so that a publish costs the trainer one request per proxy replica instead of one per
engine.

The body: `{"model_path", "weight_version", "held"?, "timeout_s"?, "engines"?}`. Every engine
listed in `engines` (default: every engine the proxy holds) gets SGLang's
`POST /update_weights_from_disk {model_path, weight_version}`, all at once, on the engine's
idle connection when there is one (the pause's), sent again on a new one if the engine closes
it before answering (the update is idempotent: the same checkpoint under the same label).
`held` (default true) says requests are held by an `in_place` pause: on a release where an
update's own cache flush is refused while they are (0.5.6 and later, `UPDATE_FLUSH_CACHE`) the
update loads with `flush_cache: false` and the cache is flushed by a request of its own, as
`EngineClient.update_weights_from_disk` does (its module docstring says why), the engine's
release read first when the proxy has not yet; a refused flush is only logged. `timeout_s`
bounds each engine's load (default `DEFAULT_UPDATE_TIMEOUT_S`).

The answer is 200 `{"weight_version", "engines": {url: null | failure}}` when the command was
valid, whatever the engines did: an engine that did not take the version is the publisher's to
hold out and catch up (`dressage.weights.disk`), not an error of the request. A URL the proxy
does not hold fails with `not_in_pool: ...`; a bad field is 400 `invalid_request` naming it.

The proxy's own record of each engine's version is not changed here: the publisher's
`/continue_generation {"weight_version", "serving"}` that follows records the version of the
engines that loaded it (on every replica, not only the one that loaded them) and reads the
others' before routing by it.

Why the proxy: its upstream client costs about a tenth of a millisecond of CPU per request,
where the trainer's `httpx` client spent about 1.5 ms per engine (`benchmarks/fleet_scale.py`:
1.5 s of the trainer's CPU per publish at 1,024 engines), and with several replicas each one
updates its share of the engines (`ProxyRolloutClient.update_weights_from_disk`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson

from dressage.api.sglang import UPDATE_FLUSH_CACHE
from dressage.asgi import Answer, HttpRequest
from dressage.data.versions import normalize_version
from dressage.engine.protocol import UpdateWeightsFromDiskRequest
from dressage.engine.wire import CALL_TIMEOUT_S, FLUSH_CACHE, UPDATE_WEIGHTS_FROM_DISK
from dressage.proxy import errors
from dressage.proxy.answers import json_response
from dressage.proxy.background import ensure_release
from dressage.proxy.endpoints.control import send_command
from dressage.proxy.errors import invalid
from dressage.proxy.state import ProxyState
from dressage.proxy.upstream import UpstreamError

log = logging.getLogger("dressage.proxy")

DEFAULT_UPDATE_TIMEOUT_S = CALL_TIMEOUT_S
"""One engine's load when the request gives no `timeout_s` (the engine client's default)."""
NOT_HELD = f"{errors.NOT_IN_POOL}: the proxy holds no engine at this URL"
_FLUSH_TIMEOUT_S = 30.0


async def update_from_disk(state: ProxyState, request: HttpRequest, body: dict[str, Any]) -> Answer:
    model_path = body.get("model_path")
    if not isinstance(model_path, str) or not model_path:
        raise invalid("model_path must be the checkpoint's path (a non-empty string)", "model_path")
    value = body.get("weight_version")
    version = normalize_version(value) if isinstance(value, str) else None
    if version is None:
        raise invalid(
            "weight_version must be a version label (a non-empty string)", "weight_version"
        )
    held = body.get("held", True)
    if not isinstance(held, bool):
        raise invalid("held must be true or false (whether a pause holds requests)", "held")
    timeout_s = body.get("timeout_s")
    if timeout_s is None:
        timeout_s = DEFAULT_UPDATE_TIMEOUT_S
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0:
        raise invalid("timeout_s must be a positive number of seconds", "timeout_s")
    urls = body.get("engines")
    if urls is None:
        urls = state.pool.urls
    if not isinstance(urls, list) or not all(isinstance(u, str) and u for u in urls):
        raise invalid("engines must be a list of engine URLs", "engines")
    payload = UpdateWeightsFromDiskRequest(model_path=model_path, weight_version=version)
    results = await asyncio.gather(
        *(load_checkpoint(state, url.rstrip("/"), payload, held, float(timeout_s)) for url in urls)
    )
    return json_response(
        {"weight_version": version, "engines": dict(zip(urls, results, strict=True))}
    )


async def load_checkpoint(
    state: ProxyState,
    url: str,
    request: UpdateWeightsFromDiskRequest,
    held: bool,
    timeout_s: float,
) -> str | None:
    """One engine's update: None when it took the version, else why not."""
    engine = state.pool.get(url)
    connections = state.connections
    if engine is None or connections is None:
        return NOT_HELD
    if held:  # how a held update flushes depends on the release (the engine client asks too)
        await ensure_release(connections, url, engine)
    flush_after = held and engine.supports(UPDATE_FLUSH_CACHE)
    if flush_after:
        request = request.model_copy(update={"flush_cache": False})
    content = orjson.dumps(request.model_dump(exclude_unset=True))
    try:
        reply = await send_command(
            connections, url, UPDATE_WEIGHTS_FROM_DISK, content, timeout_s, fresh=False
        )
    except UpstreamError as exc:
        return f"{type(exc).__name__}: {exc}"
    text = reply.body[:500].decode(errors="replace")
    if reply.status >= 400:
        return f"HTTP {reply.status}: {text}"
    try:
        answer = orjson.loads(reply.body)
    except orjson.JSONDecodeError:
        return f"not a JSON answer: {text}"
    if not isinstance(answer, dict) or answer.get("success") is not True:
        message = answer.get("message", text) if isinstance(answer, dict) else text
        return f"the engine did not load it: {message}"
    if flush_after:
        try:
            flushed = await send_command(
                connections, url, FLUSH_CACHE, b"{}", _FLUSH_TIMEOUT_S, fresh=False
            )
        except UpstreamError as exc:
            flushed = None
            log.info("engine %s: cache flush after the update not sent: %s", url, exc)
        if flushed is not None and flushed.status >= 400:
            log.info(
                "engine %s kept its prefix cache (requests still run): %s",
                url,
                flushed.body[:200].decode(errors="replace").strip(),
            )
    return None
