"""The HTTP transport of the engine clients: TLS settings built once, connection limits, and
the pooled connection an engine closed while it sat idle.

Idle connections. SGLang's engines close a connection idle for 5 s (uvicorn's
`timeout_keep_alive`: `timeout_keep_alive=5` in 0.5.2's `http_server.py`,
`timeout_keep_alive=envs.SGLANG_TIMEOUT_KEEP_ALIVE.get()` with `EnvInt(5)` in 0.5.23's). The
client drops its own idle connections after `KEEPALIVE_EXPIRY_S`, below that; but a caller
whose event loop is busy (a publisher reading a thousand answers) starts that clock late, and
may send on a connection the engine has already closed. Such a request fails on a reused
connection before any byte of the answer (`RemoteProtocolError`, `ReadError`, `WriteError`):
it is sent once more on a fresh connection (`stale_retries` counts them, each logged) when
it is idempotent or the engine cannot have read all of it; never twice.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Protocol

import httpx

log = logging.getLogger("dressage.engine")

# httpx's default TLS settings, built once: the CA bundle costs 90 ms per client to read, 90 s
# for a publisher's clients of 1,024 engines (`benchmarks/fleet_scale.py`).
tls_context = functools.cache(lambda: httpx.create_ssl_context(trust_env=True))
KEEPALIVE_EXPIRY_S = 2.0
"""Idle seconds after which the client drops a pooled connection (below servers' 5 s)."""
OWN_LIMITS = httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S)
"""An engine client's own pool. Not one pool for a fleet: httpcore's pool walks its
connections for every request, 8 ms of CPU a request across 512 engines against 0.6 to 1 ms
with a pool each (`benchmarks/fleet_scale.py`'s engines, 2026-12-07)."""
CONNECT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout)
STALE_ERRORS = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
"""How a request on a connection the peer closed while idle fails (before any answer)."""


class Trace:
    """httpcore's trace of one request: whether it went out on a pooled connection (it sent
    without connecting first), sent the whole request, and read the answer's head. A
    transport without httpcore (a mock) traces nothing: never a pooled connection."""

    __slots__ = ("answered", "connected", "sent", "started")

    def __init__(self) -> None:
        self.connected = self.started = self.sent = self.answered = False

    async def __call__(self, event: str, info: dict[str, Any]) -> None:
        if event.startswith("connection.connect_tcp."):
            self.connected = True
        elif event.endswith(".send_request_headers.started"):
            self.started = True
        elif event.endswith(".send_request_body.complete"):
            self.sent = True
        elif event.endswith(".receive_response_headers.complete"):
            self.answered = True

    def stale(self, exc: httpx.TransportError, idempotent: bool) -> bool:
        """Whether `exc` is a pooled connection the peer had closed, and the request may be
        sent again: idempotent, or not wholly sent (the engine acted on none of it)."""
        return (
            isinstance(exc, STALE_ERRORS)
            and self.started
            and not self.connected
            and not self.answered
            and (idempotent or not self.sent)
        )

class Resender(Protocol):
    """Who sends requests again: counted there."""

    stale_retries: int

    @property
    def owns_client(self) -> bool:
        """Whether its `httpx.AsyncClient` is its own (else shared with others)."""
        ...


async def send(
    by: Resender,
    client: httpx.AsyncClient,
    method: str,
    url: str,
    json_body: dict[str, Any] | None,
    request_timeout: httpx.Timeout,
    idempotent: bool,
) -> httpx.Response:
    """The answer to one request, sent once more when its pooled connection turned out
    closed (`Trace.stale`; counted in `by.stale_retries`): on a client of its own when
    `client` is `by`'s (a fresh connection for sure), else on `client` again (the closed
    connection has left its pool)."""
    trace = Trace()
    try:
        return await client.request(
            method, url, json=json_body, timeout=request_timeout, extensions={"trace": trace}
        )
    except httpx.TransportError as exc:
        if not trace.stale(exc, idempotent):
            raise
        by.stale_retries += 1
        log.info("%s %s: its idle connection was closed (%r); sent again", method, url, exc)
    if not by.owns_client:
        return await client.request(method, url, json=json_body, timeout=request_timeout)
    async with httpx.AsyncClient(verify=tls_context()) as fresh:
        return await fresh.request(method, url, json=json_body, timeout=request_timeout)
