"""The proxy's answers: JSON bodies, and errors in the shape of `dressage.proxy.errors`."""

from __future__ import annotations

from typing import Any

import orjson

from dressage.asgi import Answer
from dressage.proxy.errors import ProxyError


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Answer:
    return Answer(orjson.dumps(data), status, headers=headers)


def error_response(exc: ProxyError) -> Answer:
    return json_response(exc.body(), exc.status, exc.headers)
