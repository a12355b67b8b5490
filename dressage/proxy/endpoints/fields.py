"""Request fields several endpoints share: whose trajectory a request is, and token budgets."""

from __future__ import annotations

import uuid
from typing import Any

from dressage.asgi import HttpRequest
from dressage.proxy import errors
from dressage.proxy.errors import ProxyError, invalid

FieldPath = tuple[str, ...]
"""Keys leading to a value inside the JSON body, e.g. `("metadata", "session_id")`."""
_MAX_ID_LENGTH = 256


def session_ids(
    request: HttpRequest,
    body: dict[str, Any],
    *,
    session_fields: tuple[FieldPath, ...] = (),
    instance_fields: tuple[FieldPath, ...] = (),
) -> tuple[str, str | None]:
    """(session id, instance id) of a request.

    The session id is the first present of: the `X-Session-Id` header, the body's
    `session_id`, each of `session_fields`, the `{session_id}` path parameter (400
    `missing_session_id` when none is). The instance id: `X-Instance-Id`, the body's
    `instance_id`, each of `instance_fields`, else None.
    """
    session_id: object = request.headers.get("x-session-id") or body.get("session_id")
    instance_id: object = request.headers.get("x-instance-id") or body.get("instance_id")
    for path in session_fields:
        session_id = session_id or _lookup(body, path)
    for path in instance_fields:
        instance_id = instance_id or _lookup(body, path)
    session_id = session_id or request.path_params.get("session_id")
    if not session_id:
        raise ProxyError(
            400,
            errors.MISSING_SESSION_ID,
            "no session id: send the X-Session-Id header (one id per trajectory)",
            param="X-Session-Id",
        )
    if not isinstance(session_id, str) or len(session_id) > _MAX_ID_LENGTH:
        raise invalid(
            f"session id must be a string of at most {_MAX_ID_LENGTH} characters", "session_id"
        )
    if instance_id is not None and (
        not isinstance(instance_id, str) or len(instance_id) > _MAX_ID_LENGTH
    ):
        raise invalid(
            f"instance id must be a string of at most {_MAX_ID_LENGTH} characters", "instance_id"
        )
    return session_id, instance_id


ROUTING_KEY_HEADER = "x-smg-routing-key"
"""The header SGLang's Model Gateway routes on consistently (slime sends a sample's session
id in it with `--router-policy consistent_hashing`)."""


def generate_session_ids(
    request: HttpRequest, body: dict[str, Any]
) -> tuple[str, str | None, bool]:
    """(session id, instance id, one-off) of a `/generate` request.

    As `session_ids`; without a session id, the `X-SMG-Routing-Key` header names the session
    (the trajectory slime routes together), else the request is a trajectory of its own: a
    new id, and one-off True (the proxy finalizes it after its turn).
    """
    if request.headers.get("x-session-id") or body.get("session_id"):
        session_id, instance_id = session_ids(request, body)
        return session_id, instance_id, False
    key = request.headers.get(ROUTING_KEY_HEADER)
    one_off = not key
    named = {**body, "session_id": f"req-{uuid.uuid4().hex}" if one_off else key}
    session_id, instance_id = session_ids(request, named)
    return session_id, instance_id, one_off


def _lookup(body: dict[str, Any], path: FieldPath) -> object:
    value: object = body
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def check_budget(value: object, name: str) -> None:
    """400 `invalid_request` naming `name` unless `value` is None or an integer >= 0."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise invalid(f"{name} must be an integer >= 0", name)
