"""Engine answers parsed into pieces, and pieces assembled into one turn (pure)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dressage.data.spans import VersionSpan
from dressage.proxy.errors import ProxyError
from dressage.proxy.generation import Generation, parse_piece


def _answer(n: int, version: str | None = "v1", spans: list[Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "finish_reason": {"type": "length", "length": n},
        "weight_version": version,
        "output_token_logprobs": [[-0.5, i, None] for i in range(n)],
    }
    if spans is not None:
        meta["weight_versions"] = spans
    return {"text": "x" * n, "output_ids": list(range(n)), "meta_info": meta}


def _runs_of(versions: list[str | None]) -> list[dict[str, Any]]:
    """Reference: per-token versions run-length encoded as SGLang spans."""
    spans: list[dict[str, Any]] = []
    for i, version in enumerate(versions):
        if spans and spans[-1]["version"] == version:
            spans[-1]["end"] = i + 1
        else:
            spans.append({"version": version, "start": i, "end": i + 1})
    return spans


def test_engine_spans_give_per_token_versions() -> None:
    spans = [
        {"version": "1", "start": 0, "end": 2},
        {"version": "1", "start": 2, "end": 2},
        {"version": 2, "start": 2, "end": 3},
    ]
    piece = parse_piece(_answer(3, "2", spans), "http://e")
    assert piece.versions == ["1", "1", "2"]
    assert piece.runs == [VersionSpan("1", 2), VersionSpan("2", 1)]
    assert parse_piece(_answer(2), "http://e").runs == [VersionSpan("v1", 2)]
    assert parse_piece(_answer(0), "http://e").runs == []


@pytest.mark.parametrize(
    ("reported", "parsed"), [(0.25, 0.25), (1, 1.0), (None, None), ("0.1", None), (True, None)]
)
def test_the_engine_latency_of_a_piece_is_its_numeric_e2e_latency(
    reported: object, parsed: float | None
) -> None:
    answer = _answer(2)
    if reported is not None:
        answer["meta_info"]["e2e_latency"] = reported
    assert parse_piece(answer, "http://e").engine_latency == parsed


def test_a_turn_sums_the_engine_latency_its_pieces_report() -> None:
    gen = Generation()
    assert gen.engine_latency is None
    for latency in (0.5, None, 0.25):
        answer = _answer(1)
        if latency is not None:
            answer["meta_info"]["e2e_latency"] = latency
        gen.add(parse_piece(answer, "http://e"))
    assert gen.engine_latency == 0.75


def test_a_resumed_turn_that_ran_out_of_budget_reports_the_whole_turns_length() -> None:
    aborted = _answer(2)
    aborted["meta_info"]["finish_reason"] = {"type": "abort", "message": "paused"}
    gen = Generation()
    gen.add(parse_piece(aborted, "http://e"))
    gen.add(parse_piece(_answer(2), "http://e"))
    assert gen.finish_reason == {"type": "length", "length": 4}


@pytest.mark.parametrize(
    "spans",
    [
        [{"version": "1", "start": 1, "end": 3}],
        [{"version": "1", "start": 0, "end": 2}],
        [{"version": "1", "start": 0}],
    ],
)
def test_inconsistent_engine_spans_are_engine_errors(spans: list[Any]) -> None:
    with pytest.raises(ProxyError) as info:
        parse_piece(_answer(3, "1", spans), "http://e")
    assert info.value.name == "engine_error"


_PIECES = st.lists(
    st.lists(st.tuples(st.sampled_from(["a", "b", None]), st.integers(0, 3)), max_size=4),
    max_size=4,
)


@given(_PIECES)
def test_turn_spans_are_the_runs_of_its_token_versions(pieces: list[list[Any]]) -> None:
    gen = Generation()
    for runs in pieces:
        spans, start = [], 0
        for version, count in runs:
            spans.append({"version": version, "start": start, "end": start + count})
            start += count
        gen.add(parse_piece(_answer(start, "z", spans or None), "http://e"))
    assert gen.version_spans() == _runs_of(gen.versions)
    assert len(gen.versions) == len(gen.output_ids)
