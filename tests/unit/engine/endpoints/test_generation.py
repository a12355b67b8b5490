"""`shape_answer`: a scheduler snapshot as each release answers it (its `meta_info` keys, its
abort shapes, its stream chunks)."""

from __future__ import annotations

from typing import Any

from dressage.engine.embedded.endpoints.generation import shape_answer
from dressage.engine.embedded.release_profiles import PROFILE_0_5_2, PROFILE_0_5_23, ReleaseProfile
from dressage.engine.embedded.scheduler import Request
from dressage.engine.protocol import SamplingParams


def snapshot(tokens: list[int], finish: dict[str, Any] | None, spans: list[Any]) -> dict[str, Any]:
    return {
        "text": "x" * len(tokens),
        "output_ids": tokens,
        "meta_info": {
            "id": "r",
            "finish_reason": finish,
            "prompt_tokens": 2,
            "completion_tokens": len(tokens),
            "cached_tokens": 0,
            "weight_version": spans[-1]["version"] if spans else "v1",
            "weight_versions": spans,
            "e2e_latency": 0.5,
        },
    }


def request(*, admitted: bool = True, cause: str | None = None, stream: bool = False) -> Request:
    req = Request(
        rid="r", prompt_ids=[1, 2], params=SamplingParams(), emit=lambda s, f: None, stream=stream
    )
    req.admitted = admitted
    req.abort_cause = cause
    return req


SPANS = [{"version": "v0", "start": 0, "end": 1}, {"version": "v1", "start": 1, "end": 3}]


def shaped(profile: ReleaseProfile, **kw: Any) -> dict[str, Any]:
    finish = kw.pop("finish", {"type": "length", "length": 3})
    snap = snapshot(kw.pop("tokens", [5, 6, 7]), finish, kw.pop("spans", SPANS))
    return shape_answer(profile, snap, label=kw.pop("label", "v1"), **kw)


def test_a_finished_answer_has_exactly_the_releases_keys() -> None:
    old = shaped(PROFILE_0_5_2, request=request(), final=True, label="v1")
    new = shaped(PROFILE_0_5_23, request=request(), final=True)
    assert list(old["meta_info"]) == list(PROFILE_0_5_2.meta_info_keys)
    assert set(new["meta_info"]) == set(PROFILE_0_5_23.meta_info_keys)
    assert new["meta_info"]["weight_versions"] == SPANS
    assert "weight_versions" not in old["meta_info"]


def test_0_5_2_reports_its_label_and_0_5_23_the_last_spans_version() -> None:
    """0.5.2's `meta_info.weight_version` is the server's label; 0.5.23 overwrites it with
    the last span's (`add_weight_versions_to_meta_info`), which after a refused flush is the
    new version while the label is still the old one."""
    assert (
        shaped(PROFILE_0_5_2, request=request(), final=True, label="v0")["meta_info"][
            "weight_version"
        ]
        == "v0"
    )
    assert (
        shaped(PROFILE_0_5_23, request=request(), final=True, label="v0")["meta_info"][
            "weight_version"
        ]
        == "v1"
    )


def test_a_running_abort_is_finish_abort_with_the_tokens_so_far() -> None:
    abort = {"type": "abort", "message": "Aborted by request."}
    for profile in (PROFILE_0_5_2, PROFILE_0_5_23):
        out = shaped(profile, request=request(cause="request"), final=True, finish=abort)
        assert out["meta_info"]["finish_reason"] == profile.aborts.running_finish
        assert out["output_ids"] == [5, 6, 7]


def test_a_queued_abort_is_each_releases_shape() -> None:
    abort = {"type": "abort", "message": "Aborted by pause_generation."}
    queued = request(admitted=False, cause="pause")
    old = shaped(PROFILE_0_5_2, request=queued, final=True, finish=abort, tokens=[], spans=[])
    assert old == {
        "text": "",
        "meta_info": {
            "id": "r",
            "finish_reason": {"type": "abort", "message": "Abort before prefill"},
            "prompt_tokens": 0,
            "completion_tokens": 0,
        },
    }
    new = shaped(PROFILE_0_5_23, request=queued, final=True, finish=abort, tokens=[], spans=[])
    assert new["output_ids"] == []
    assert new["meta_info"]["finish_reason"]["message"] == "Abort in waiting queue"
    assert new["meta_info"]["weight_versions"] == [{"version": "v1", "start": 0, "end": 0}]
    assert "prompt_tokens" not in new["meta_info"]


def test_a_shutdown_abort_keeps_its_own_message() -> None:
    finish = {"type": "abort", "message": "engine shutting down"}
    out = shaped(PROFILE_0_5_23, request=request(cause="shutdown"), final=True, finish=finish)
    assert out["meta_info"]["finish_reason"] == finish


def test_stream_chunks_carry_new_tokens_on_0_5_2_and_all_on_0_5_23() -> None:
    streaming = request(stream=True)
    old = shaped(PROFILE_0_5_2, request=streaming, final=False, finish=None, offset=2)
    new = shaped(PROFILE_0_5_23, request=streaming, final=False, finish=None, offset=2)
    assert old["output_ids"] == [7]
    assert new["output_ids"] == [5, 6, 7]
    assert "e2e_latency" not in old["meta_info"]
    assert old["text"] == new["text"] == "xxx"


def test_what_a_request_asked_for_on_top_passes_through() -> None:
    """Keys the scheduler adds for a request (`output_token_logprobs`, or a new one such as
    `routed_experts`) reach the answer under every profile."""
    snap = snapshot([5], {"type": "length", "length": 1}, SPANS[:1])
    snap["meta_info"]["output_token_logprobs"] = [[-0.5, 5, None]]
    snap["meta_info"]["routed_experts"] = "AAAA"
    for profile in (PROFILE_0_5_2, PROFILE_0_5_23):
        meta = shape_answer(profile, snap, label="v0", request=request(), final=True)["meta_info"]
        assert meta["output_token_logprobs"] == [[-0.5, 5, None]]
        assert meta["routed_experts"] == "AAAA"
