"""Answers, request bodies and the guard every embedded-engine endpoint shares."""

from __future__ import annotations

import logging
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from dressage.asgi import (
    Answer,
    BodyTooLarge,
    ClientDisconnected,
    Handler,
    HttpRequest,
    StreamAnswer,
    json_response,
)
from dressage.engine.embedded.validation import Refusal, bad_request, describe_validation_error

log = logging.getLogger("dressage.engine")

MAX_BODY_BYTES = 64 * 1024 * 1024
"""Largest request body accepted (a prompt of millions of token ids); beyond it, HTTP 413."""


def error_response(message: str, status: int = 400) -> Answer:
    """SGLang's `_create_error_response` shape, `{"error": {"message": ...}}`."""
    return json_response({"error": {"message": message}}, status)


def text_response(text: str, status: int = 200) -> Answer:
    return Answer(text.encode(), status, content_type="text/plain; charset=utf-8")


def empty_response(status: int = 200) -> Answer:
    return text_response("", status)


def refusal_response(refusal: Refusal) -> Answer:
    if refusal.log:
        log.warning("refused: %s", refusal.log)
    if isinstance(refusal.body, str):
        return text_response(refusal.body, refusal.status)
    return json_response(refusal.body, refusal.status)


def group_answer(success: bool, message: str) -> Answer:
    """SGLang's answer of the weight-update endpoints: `{"success", "message"}`, 200 or 400."""
    return json_response({"success": success, "message": message}, 200 if success else 400)


M = TypeVar("M", bound=BaseModel)


def parse(model: type[M], data: dict[str, Any]) -> M:
    """`data` as a `model` request; a `Refusal` (400 naming the field) otherwise."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise bad_request(describe_validation_error(exc)) from None


async def read_body(request: HttpRequest, *, optional: bool = False) -> dict[str, Any]:
    """The JSON object of the request; `Refusal` (400 naming the problem) otherwise."""
    raw = await request.body(MAX_BODY_BYTES)
    if not raw.strip() and optional:
        return {}
    try:
        data = orjson.loads(raw)
    except ValueError as exc:
        raise bad_request(f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise bad_request("request body must be a JSON object")
    return data


def guarded(handler: Handler) -> Handler:
    """`handler`, with a `Refusal` answered as it says, a body too large answered 413, a
    client gone mid-body 400, and any other exception logged and answered 500: no request
    takes the server down."""

    async def guarded_handler(request: HttpRequest) -> Answer | StreamAnswer:
        try:
            return await handler(request)
        except Refusal as refusal:
            return refusal_response(refusal)
        except BodyTooLarge as exc:
            return error_response(f"request body: {exc}", 413)
        except ClientDisconnected as exc:
            return error_response(str(exc))
        except Exception as exc:
            log.exception("error handling %s %s", request.method, request.path)
            return error_response(f"internal error: {type(exc).__name__}: {exc}", 500)

    return guarded_handler


def not_routed(request: HttpRequest, known_path: bool) -> Answer:
    """405 for a known path and another method, 404 for a path the release does not serve
    (a route another release has, too), each naming what was asked."""
    if known_path:
        return error_response(f"method {request.method} is not allowed on {request.path}", 405)
    return error_response(f"no such endpoint: {request.path}", 404)
