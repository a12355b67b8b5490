"""The label a failed rollout is counted under (`RolloutError.reason`)."""

from __future__ import annotations

import pytest

from dressage.proxy import errors
from dressage.proxy.client import RolloutError
from dressage.proxy.span_rule import (
    PartialRolloutStalenessExceeded,
    StalenessRefusal,
    VersionChangedWithoutPartialRollout,
    staleness_error_names,
)


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


def test_every_staleness_refusal_and_nothing_else_is_a_staleness_failure() -> None:
    """The refusal's type decides: both `StalenessRefusal`s (the span limit's 502 and the
    single-version rule's 409) count, no other proxy error does."""
    refusals = {PartialRolloutStalenessExceeded, VersionChangedWithoutPartialRollout}
    assert staleness_error_names() == {r.error_name for r in refusals}
    for refusal in refusals:
        assert issubclass(refusal, StalenessRefusal)
        assert RolloutError("x: y", code=refusal.error_name).staleness
    names = {v for k, v in vars(errors).items() if k.isupper() and isinstance(v, str)}
    for name in names - staleness_error_names():
        assert not RolloutError("x: y", code=name).staleness, name
    assert not RolloutError("x: y").staleness


def test_a_version_changed_refusal_counts_as_a_staleness_failure() -> None:
    error = RolloutError(
        "POST /generate: HTTP 409", code=errors.VERSION_CHANGED_WITHOUT_PARTIAL_ROLLOUT
    )
    assert error.staleness
    assert error.reason == "version_changed_without_partial_rollout"
