"""The label a failed rollout is counted under (`RolloutError.reason`)."""

from __future__ import annotations

import pytest

from dressage.proxy.client import RolloutError


@pytest.mark.parametrize(
    ("message", "code", "reason"),
    [
        # httpx timeouts carry no text: the exception's type names the failure.
        ("POST /generate: ReadTimeout: ", None, "ReadTimeout"),
        ("GET /segments: ConnectError: connection refused", None, "connection refused"),
        ("POST /generate: HTTP 502 engine_error: engine died", "engine_error", "engine_error"),
        ("nothing to split", None, "rollout_error"),
    ],
)
def test_the_counting_label_is_the_code_else_the_last_words(
    message: str, code: str | None, reason: str
) -> None:
    assert RolloutError(message, code=code).reason == reason


def test_only_the_staleness_refusal_is_a_staleness_failure() -> None:
    assert RolloutError("x: y", code="partial_rollout_staleness_exceeded").staleness
    assert not RolloutError("x: y", code="engine_error").staleness
