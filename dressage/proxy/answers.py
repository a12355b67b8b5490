"""The proxy's answers: JSON bodies (`dressage.asgi.json_response`, shared with the engine), and
errors in the shape of `dressage.proxy.errors`."""

from __future__ import annotations

from dressage.asgi import Answer, json_response
from dressage.proxy.errors import ProxyError

__all__ = ["error_response", "json_response"]


def error_response(exc: ProxyError) -> Answer:
    return json_response(exc.body(), exc.status, exc.headers)
