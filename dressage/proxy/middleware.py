"""What every request goes through around its endpoint: auth, admission, body, metrics.

`endpoint(state, name, fn, ...)` turns an endpoint function `fn(state, request, body)` into
the route handler. It is one closure per endpoint, built once: a request passes through no
other layer. In order:

1. auth: with `--auth-token`, the `Authorization: Bearer <token>` header must match
   (401 `unauthorized`); `/health` and `/metrics` are open;
2. admission, for the generating endpoints: at most `--max-concurrency` of their requests in
   flight at once, the others get 429 `too_many_requests` with `Retry-After: 1`;
3. the JSON body, read within `--max-body-bytes` (413 `request_too_large`) and handed to `fn`
   as a dict (400 `invalid_json` when it is not a JSON object; an empty optional body, and the
   body of an endpoint that takes none, are `{}`);
4. metrics: requests by endpoint and status code, and latency by endpoint.

A `ProxyError` becomes its JSON error answer; any other exception is logged and answered
500 `internal_error`.
"""

from __future__ import annotations

import enum
import hmac
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from dressage.asgi import Answer, BodyTooLarge, ClientDisconnected, HttpRequest
from dressage.proxy import errors
from dressage.proxy.answers import error_response
from dressage.proxy.errors import ProxyError, invalid
from dressage.proxy.state import ProxyState

log = logging.getLogger("dressage.proxy")

EndpointFn = Callable[[ProxyState, HttpRequest, dict[str, Any]], Awaitable[Answer]]
"""An endpoint: the app's state, the request and its JSON body to a complete answer (streams
are sent as one chunk)."""
Handler = Callable[[HttpRequest], Awaitable[Answer]]
"""A route handler: an endpoint wrapped by `endpoint`."""


class Body(enum.Enum):
    """What an endpoint reads from the request body."""

    NONE = "none"
    """Nothing: the body is not read."""
    JSON = "json"
    """A JSON object, required."""
    OPTIONAL_JSON = "optional_json"
    """A JSON object, or an empty body (`{}`)."""


def endpoint(
    state: ProxyState,
    name: str,
    fn: EndpointFn,
    *,
    body: Body = Body.NONE,
    auth: bool = True,
    limited: bool = False,
) -> Handler:
    """The route handler of `fn`, metered as endpoint `name`; `limited` counts it against
    `--max-concurrency`."""
    metrics = state.metrics
    requests = metrics.requests
    duration = metrics.duration.labels(name)
    inflight_gauge = metrics.inflight
    config = state.config
    max_inflight = config.max_concurrency
    max_body = config.max_body_bytes
    token = config.auth_token
    expected = f"Bearer {token}".encode() if auth and token else None
    reads_body = body is not Body.NONE
    optional = body is Body.OPTIONAL_JSON
    answered: dict[int, Any] = {}
    """The request counter of each status code of this endpoint (labels looked up once)."""

    async def handler(request: HttpRequest) -> Answer:
        start = time.perf_counter()
        admitted = False
        try:
            if expected is not None:
                check_bearer(request, expected)
            if limited:
                admit(state, max_inflight)
                admitted = True
            data = await read_json(request, max_body, optional=optional) if reads_body else {}
            response = await fn(state, request, data)
        except ProxyError as exc:
            response = error_response(exc)
        except Exception:
            log.exception("unhandled error on %s %s", request.method, request.path)
            response = error_response(
                ProxyError(500, errors.INTERNAL_ERROR, "internal proxy error (logged)")
            )
        finally:
            if admitted:
                state.inflight -= 1
                inflight_gauge.dec()
        counter = answered.get(response.status)
        if counter is None:
            counter = answered[response.status] = requests.labels(name, str(response.status))
        counter.inc()
        duration.observe(time.perf_counter() - start)
        return response

    return handler


def check_bearer(request: HttpRequest, expected: bytes) -> None:
    """401 `unauthorized` unless the `Authorization` header is exactly `expected`."""
    given = request.headers.get("authorization", "").encode()
    if not hmac.compare_digest(given, expected):
        raise ProxyError(
            401,
            errors.UNAUTHORIZED,
            "missing or wrong bearer token (Authorization: Bearer <token>)",
            headers={"WWW-Authenticate": "Bearer"},
        )


def admit(state: ProxyState, max_inflight: int) -> None:
    """Count one more generating request in flight; 429 `too_many_requests` at the limit.
    The caller releases it (`state.inflight -= 1`, the gauge down) once answered."""
    if state.inflight >= max_inflight:
        raise ProxyError(
            429,
            errors.TOO_MANY_REQUESTS,
            f"{state.inflight} generations in flight, the limit is {max_inflight} "
            "(--max-concurrency); retry later",
            headers={"Retry-After": "1"},
        )
    state.inflight += 1
    state.metrics.inflight.inc()


async def read_json(request: HttpRequest, limit: int, *, optional: bool) -> dict[str, Any]:
    """The request body as a JSON object, at most `limit` bytes (checked against
    `Content-Length` before reading, and while reading)."""
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
        data = orjson.loads(body)
    except ValueError as exc:
        raise ProxyError(400, errors.INVALID_JSON, f"request body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ProxyError(400, errors.INVALID_JSON, "request body must be a JSON object")
    return data


def _too_large(size: int, limit: int) -> ProxyError:
    return ProxyError(
        413,
        errors.REQUEST_TOO_LARGE,
        f"request body of {size} bytes exceeds the limit of {limit} bytes (--max-body-bytes)",
    )
