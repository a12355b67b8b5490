"""The SGLang Model Gateway endpoints slime and miles call on their router: `/workers` and
`/abort_request`, so a run can point its router address at the proxy.

- `GET /workers` lists the proxy's engines in the gateway's shape (`WorkerListResponse`:
  `{"workers": [{"id", "url", "model_id", "worker_type", "is_healthy", "load",
  "connection_mode", ...}], "total", "stats"}`); slime reads `workers[*].url` to abort the
  engines directly (`slime/rollout/sglang_rollout.py` `abort`) and `workers[*].id` to
  deregister one (`slime/backends/sglang_utils/sglang_engine.py` `shutdown`).
- `POST /workers {"url": ...}` adds an engine to the pool, as slime registers every engine it
  starts or is given (`SGLangEngine._register_to_router`); the engine is routed to once it
  passes a health check. `DELETE /workers/{id}` removes one (its generations in flight
  finish). Only `regular` workers are taken: the proxy does not route prefill/decode
  disaggregation. With `--engine-urls-file` the file owns the engine set (the operator
  writes it), and both answer 409.
- `POST /abort_request` sends its body (SGLang's `AbortReq`: `{"rid": ...}` or
  `{"abort_all": true}`) to every engine and answers each engine's result, 502
  `engine_error` when a healthy one did not take it (an unhealthy engine runs none of the
  proxy's generations: its failure is reported, not counted). A generation aborted this
  way ends with `finish_reason.type == "abort"` and is recorded with the tokens it had.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import orjson

from dressage.asgi import Answer, HttpRequest
from dressage.engine.wire import ABORT_REQUEST
from dressage.proxy import errors
from dressage.proxy.answers import json_response
from dressage.proxy.config import normalize_engine_urls
from dressage.proxy.errors import ProxyError, invalid
from dressage.proxy.state import ProxyState
from dressage.proxy.upstream import UpstreamError

_ABORT_TIMEOUT_S = 30.0


def worker_id(url: str) -> str:
    """A stable id of the engine at `url` that fits in a URL path."""
    return hashlib.sha256(url.encode()).hexdigest()[:16]


async def list_workers(state: ProxyState, request: HttpRequest, body: dict[str, Any]) -> Answer:
    model = state.config.served_model_name
    workers = [
        {
            "id": worker_id(e.url),
            "url": e.url,
            "model_id": model,
            "priority": 50,
            "cost": 1.0,
            "worker_type": "regular",
            "is_healthy": e.healthy,
            "load": e.inflight,
            "connection_mode": "http",
            "metadata": {
                "routable": str(state.pool.routable(e)).lower(),
                "weight_version": e.weight_version or "",
            },
        }
        for e in state.pool.engines
    ]
    healthy = sum(1 for w in workers if w["is_healthy"])
    stats = {
        "total_workers": len(workers),
        "healthy_workers": healthy,
        "total_models": 1 if workers else 0,
        "total_load": sum(int(w["load"]) for w in workers),  # type: ignore[call-overload]
        "by_type": {"regular": len(workers), "prefill": 0, "decode": 0},
    }
    return json_response({"workers": workers, "total": len(workers), "stats": stats})


def _owned_by_file(state: ProxyState) -> None:
    if state.config.engine_urls_file is not None:
        raise ProxyError(
            409,
            errors.INVALID_REQUEST,
            "the engine set is read from --engine-urls-file; change that file instead",
        )


async def add_worker(state: ProxyState, request: HttpRequest, body: dict[str, Any]) -> Answer:
    _owned_by_file(state)
    url = body.get("url")
    if not isinstance(url, str):
        raise invalid("url is required: the engine's base URL", "url")
    kind = body.get("worker_type", "regular")
    if kind != "regular":
        raise invalid(
            f"worker_type {kind!r} is not supported: the proxy routes regular workers only "
            "(no prefill/decode disaggregation)",
            "worker_type",
        )
    try:
        (url,) = normalize_engine_urls([url])
    except ValueError as exc:
        raise invalid(str(exc), "url") from None
    added, _ = state.pool.set_urls([*state.pool.urls, url])
    for new in added:
        state.metrics.engine_health(new, False)
    return json_response(
        {"status": "added" if added else "exists", "worker_id": worker_id(url), "url": url}
    )


async def remove_worker(state: ProxyState, request: HttpRequest, body: dict[str, Any]) -> Answer:
    _owned_by_file(state)
    wanted = request.path_params["worker_id"]
    url = next((u for u in state.pool.urls if wanted in (worker_id(u), u)), None)
    if url is None:
        raise ProxyError(404, errors.NOT_FOUND, f"no worker {wanted!r}")
    state.pool.set_urls([u for u in state.pool.urls if u != url])
    state.metrics.engine_left(url)
    return json_response({"status": "removed", "worker_id": worker_id(url), "url": url})


async def abort_request(state: ProxyState, request: HttpRequest, body: dict[str, Any]) -> Answer:
    rid = body.get("rid")
    if rid is not None and not isinstance(rid, str | list):
        raise invalid("rid must be a request id (or a list of them)", "rid")
    if not isinstance(body.get("abort_all", False), bool):
        raise invalid("abort_all must be a boolean", "abort_all")
    connections = state.connections
    assert connections is not None, "engines are commanded only while the app serves"
    payload = orjson.dumps(body)

    async def send(url: str) -> str | None:
        try:
            reply = await connections.request(
                "POST", url, ABORT_REQUEST, payload, timeout_s=_ABORT_TIMEOUT_S, fresh=True
            )
        except UpstreamError as exc:
            return f"{type(exc).__name__}: {exc}"
        if reply.status >= 400:
            return f"HTTP {reply.status}: {reply.body[:200].decode(errors='replace')}"
        return None

    urls = state.pool.urls
    excused = {e.url for e in state.pool.engines if not e.healthy}
    results = dict(zip(urls, await asyncio.gather(*(send(u) for u in urls)), strict=True))
    shown = {
        url: "ok"
        if failure is None
        else (f"not routed (unhealthy), {failure}" if url in excused else failure)
        for url, failure in results.items()
    }
    failed = [u for u, failure in results.items() if failure is not None and u not in excused]
    if failed:
        raise ProxyError(
            502,
            errors.ENGINE_ERROR,
            f"{len(failed)} engine(s) did not take the abort",
            detail={"engines": shown},
        )
    return json_response({"engines": shown})
