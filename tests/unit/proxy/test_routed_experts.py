"""Routed experts in the proxy (pure): read from engine answers, assembled over the pieces of a
turn and over the turns of a segment, first report kept, and written into the records."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import pytest

from dressage.api.proxy_settings import proxy_settings
from dressage.data.expert_routing import RoutedExperts
from dressage.proxy.config import ProxyConfig
from dressage.proxy.errors import ProxyError
from dressage.proxy.generation import Generation, parse_piece
from dressage.proxy.records import record_to_sample, segment_record
from dressage.proxy.sessions import Session

WIDTH = 4
"""2 layers x top-2."""


def _routes(rows: int, fill: int) -> np.ndarray:
    return np.full((rows, WIDTH), fill, dtype=np.int32)


def _answer(n: int, routes: np.ndarray | None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "finish_reason": {"type": "length", "length": n},
        "weight_version": "v1",
        "output_token_logprobs": [[-0.5, i, None] for i in range(n)],
    }
    if routes is not None:
        meta["routed_experts"] = base64.b64encode(routes.tobytes()).decode()
    return {"text": "", "output_ids": list(range(n)), "meta_info": meta}


def test_a_piece_reads_the_routing_of_its_input_and_output_but_the_last_token() -> None:
    piece = parse_piece(_answer(3, _routes(5 + 3 - 1, 1)), "http://e", prompt_tokens=5)
    assert piece.routed_experts is not None
    assert (piece.routed_experts.rows, piece.routed_experts.width) == (7, WIDTH)
    assert parse_piece(_answer(3, None), "http://e", prompt_tokens=5).routed_experts is None


def test_routes_that_do_not_fit_the_tokens_are_an_engine_error() -> None:
    with pytest.raises(ProxyError, match=r"do not split into 7 rows .*5 prompt \+ 3 output"):
        parse_piece(_answer(3, _routes(5, 1)[:, :3]), "http://e", prompt_tokens=5)


def test_an_aborted_piece_with_routes_that_do_not_fit_is_kept_without_them() -> None:
    aborted = _answer(2, _routes(5, 1)[:, :1])  # 5 int32 for 6 tokens
    aborted["meta_info"]["finish_reason"] = {"type": "abort", "message": "paused"}
    piece = parse_piece(aborted, "http://e", prompt_tokens=5)
    assert piece.routed_experts is None
    assert piece.output_ids == [0, 1]


def test_the_pieces_of_a_resumed_turn_keep_each_positions_first_report() -> None:
    gen = Generation()
    # Piece 1: 5 prompt tokens, 2 outputs, aborted: rows 0..5 (6 rows) from the old weights.
    gen.add(parse_piece(_answer(2, _routes(6, 1)), "http://e", prompt_tokens=5))
    # Piece 2 resumes from 7 tokens, 3 more outputs: rows 0..8 from the new weights.
    gen.add(parse_piece(_answer(3, _routes(9, 2)), "http://e", prompt_tokens=7))
    assert gen.routed_experts is not None
    assert gen.routed_experts.values() == [1] * 6 * WIDTH + [2] * 3 * WIDTH


def _decoded(routes: np.ndarray) -> RoutedExperts:
    return RoutedExperts(routes.tobytes(), len(routes), WIDTH)


def test_a_segment_grows_its_routes_turn_by_turn_and_a_rewrite_starts_afresh() -> None:
    session = Session("s", "g", created_at=0.0, last_active=0.0)
    plan = session.begin_turn([1, 2, 3], 0.0)
    session.commit_turn(
        plan, [4, 5], [0.0, 0.0], ["v1", "v1"], 0.0, routed_experts=_decoded(_routes(4, 1))
    )
    # The next turn appends two tool tokens; the engine reports all 8 forwarded tokens.
    plan = session.begin_turn([1, 2, 3, 4, 5, 6, 7], 0.0)
    session.commit_turn(
        plan, [8, 9], [0.0, 0.0], ["v1", "v1"], 0.0, routed_experts=_decoded(_routes(8, 2))
    )
    segment = session.current
    assert segment is not None
    assert segment.routed_experts is not None
    assert segment.routed_experts.values() == [1] * 4 * WIDTH + [2] * 4 * WIDTH
    record = segment_record(session, segment, reward=1.0, record_token_versions=True)
    assert record["routed_experts_rows"] == 8
    assert record_to_sample(record).routed_experts == segment.routed_experts
    plan = session.begin_turn([9, 9, 9], 0.0)
    session.commit_turn(plan, [1], [0.0], ["v1"], 0.0, routed_experts=_decoded(_routes(3, 3)))
    rewritten = session.current
    assert rewritten is not None
    assert rewritten.index == 1
    assert rewritten.routed_experts is not None
    assert rewritten.routed_experts.values() == [3] * 3 * WIDTH


def test_a_turn_without_routes_records_none() -> None:
    session = Session("s", "g", created_at=0.0, last_active=0.0)
    plan = session.begin_turn([1, 2, 3], 0.0)
    segment = session.commit_turn(plan, [4], [0.0], ["v1"], 0.0)
    record = segment_record(session, segment, reward=0.0, record_token_versions=True)
    assert record["routed_experts"] is None
    assert record_to_sample(record).routed_experts is None


@pytest.mark.parametrize(("mode", "records"), [("off", False), ("record", True), ("replay", True)])
def test_the_job_turns_recording_on(mode: str, records: bool) -> None:
    from dressage.api import validate_job

    job = validate_job(
        {
            "apiVersion": "dressage.io/v1alpha1",
            "kind": "AsyncRLJob",
            "metadata": {"name": "moe"},
            "spec": {
                "model": {"source": "builtin:tiny-moe"},
                "inference": {"sglangVersion": "0.5.23"},
                "rollout": {"routingReplay": mode},
            },
        }
    )
    config = ProxyConfig(engine_urls=["http://engine:30000"], **proxy_settings(job))
    assert config.record_routed_experts is records
