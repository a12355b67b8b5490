"""Typed errors of the engine client: the exception type tells the caller what to do.

- `EngineUnavailable`: the engine could not be reached or is not ready (connection refused or
  reset, timeout, HTTP 503). Try another engine or later; the request may not have run.
- `EngineRequestError`: the engine refused the request (HTTP 4xx); retrying the same request
  will fail the same way. The message is the server's and names the field at fault.
- `EngineServerError`: the engine failed while handling the request (HTTP 5xx other than 503).
- `EngineVersionError`: the engine's SGLang release lacks a feature the call needs (raised by
  the client before sending; see `sglang_support`). Use a newer engine or drop the feature.
"""

from __future__ import annotations


class EngineError(Exception):
    """Base of every engine client error."""

    def __init__(self, message: str, *, url: str = "", status_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.url = url
        self.status_code = status_code

    def __str__(self) -> str:
        where = f" ({self.url})" if self.url else ""
        code = f"HTTP {self.status_code}: " if self.status_code is not None else ""
        return f"{code}{self.message}{where}"


class EngineUnavailable(EngineError):
    """Connection refused/reset, timeout, or HTTP 503 (not ready)."""


class EngineRequestError(EngineError):
    """HTTP 4xx: the request is invalid for this engine."""


class EngineServerError(EngineError):
    """HTTP 5xx (except 503): the engine failed."""


class EngineVersionError(EngineError):
    """The engine's SGLang release is too old for what was asked (nothing was sent)."""
