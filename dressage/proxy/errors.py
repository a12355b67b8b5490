"""Typed proxy errors and their JSON shape.

Every error the proxy answers has the same body, close to OpenAI's so that OpenAI clients
surface the message:

    {"error": {"type": NAME, "code": NAME, "message": "...", "param": FIELD|null, "detail": {...}}}

`NAME` is stable (clients branch on it); `message` is for people.
"""

from __future__ import annotations

from typing import Any

# Stable error names (the `type` of the error body), with their HTTP status.
INVALID_JSON = "invalid_json"  # 400
INVALID_REQUEST = "invalid_request"  # 400
MISSING_SESSION_ID = "missing_session_id"  # 400
UNAUTHORIZED = "unauthorized"  # 401
NOT_FOUND = "not_found"  # 404
MODEL_NOT_FOUND = "model_not_found"  # 404 (OpenAI's name for an unknown `model`)
METHOD_NOT_ALLOWED = "method_not_allowed"  # 405
SESSION_BUSY = "session_busy"  # 409
SESSION_FINALIZED = "session_finalized"  # 409
VERSION_CHANGED_WITHOUT_PARTIAL_ROLLOUT = "version_changed_without_partial_rollout"  # 409
REQUEST_TOO_LARGE = "request_too_large"  # 413
UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"  # 415
TOO_MANY_REQUESTS = "too_many_requests"  # 429
TOO_MANY_SESSIONS = "too_many_sessions"  # 429 (live sessions at max_sessions, none abandoned)
INTERNAL_ERROR = "internal_error"  # 500
PARTIAL_ROLLOUT_STALENESS_EXCEEDED = "partial_rollout_staleness_exceeded"  # 502
ENGINE_FAILED = "engine_failed"  # 502
ENGINE_ERROR = "engine_error"  # 502 (engine answered an error status)
NO_HEALTHY_ENGINE = "no_healthy_engine"  # 503
ENGINE_BUSY = "engine_busy"  # 503 (every engine's queue stayed full)
PAUSE_TIMEOUT = "pause_timeout"  # 503
ENGINE_TIMEOUT = "engine_timeout"  # 504
DRAIN_TIMEOUT = "drain_timeout"  # 504 (generations still in flight on a draining engine)
NOT_IN_POOL = "not_in_pool"  # one engine's result in a fan-out: the proxy does not hold it


class ProxyError(Exception):
    """An error answered to the client as `status` with the JSON body above."""

    def __init__(
        self,
        status: int,
        name: str,
        message: str,
        *,
        param: str | None = None,
        detail: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.name = name
        self.message = message
        self.param = param
        self.detail = detail
        self.headers = headers

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {
            "type": self.name,
            "code": self.name,
            "message": self.message,
            "param": self.param,
        }
        if self.detail is not None:
            error["detail"] = self.detail
        return {"error": error}


def invalid(message: str, param: str | None = None) -> ProxyError:
    """A 400 `invalid_request` naming the field at fault."""
    return ProxyError(400, INVALID_REQUEST, message, param=param)
