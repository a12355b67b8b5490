"""Routed experts in SGLang's encoding, first report wins, and their way through the codec."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dressage.data.codec import record_to_sample, sample_to_record
from dressage.data.expert_routing import RoutedExperts, merge_routes
from dressage.data.samples import Sample


def _sglang_encoding(routes: np.ndarray) -> str:
    """What SGLang's detokenizer sends: `pybase64.b64encode(tensor.numpy().tobytes())` of the
    int32 `[seqlen - 1, layers, top_k]` tensor (`DetokenizerManager._b64_encode_per_request`,
    0.5.23; `_extract_routed_experts`, 0.5.7)."""
    return base64.b64encode(routes.astype(np.int32).tobytes()).decode()


def test_decodes_what_sglang_sends_row_by_row() -> None:
    routes = np.arange(5 * 3 * 2).reshape(5, 3, 2) % 7
    decoded = RoutedExperts.from_base64(_sglang_encoding(routes), rows=5)
    assert (decoded.rows, decoded.width) == (5, 6)
    assert decoded.values() == routes.flatten().tolist()
    assert decoded.to_base64() == _sglang_encoding(routes)
    assert decoded.head(2).values() == routes[:2].flatten().tolist()


@pytest.mark.parametrize(
    ("text", "rows", "message"),
    [
        ("not base64!", 2, "not base64"),
        (base64.b64encode(b"\0" * 12).decode(), 2, "do not split into 2 rows"),
        (base64.b64encode(b"").decode(), 3, "do not split"),
        (base64.b64encode(b"\0" * 8).decode(), 0, "for 0 tokens"),
    ],
)
def test_malformed_routes_are_refused(text: str, rows: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RoutedExperts.from_base64(text, rows)


rows_strategy = st.lists(st.lists(st.integers(0, 63), min_size=4, max_size=4), max_size=12)


@given(earlier=rows_strategy, later=rows_strategy)
def test_a_position_keeps_its_first_report(
    earlier: list[list[int]], later: list[list[int]]
) -> None:
    def routes(rows: list[list[int]]) -> RoutedExperts:
        data = np.asarray(rows, dtype=np.int32).reshape(len(rows), 4).tobytes()
        return RoutedExperts(data, len(rows), 4)

    merged = merge_routes(routes(earlier), routes(later))
    assert merged is not None
    assert merged.rows == max(len(earlier), len(later))
    flat = merged.values()
    assert flat[: 4 * len(earlier)] == [v for row in earlier for v in row]
    assert flat[4 * len(earlier) :] == [v for row in later[len(earlier) :] for v in row]
    assert merge_routes(None, routes(later)) == routes(later)
    assert merge_routes(routes(earlier), None) == routes(earlier)


def test_widths_must_agree_to_extend() -> None:
    with pytest.raises(ValueError, match="width 2 cannot extend width 4"):
        RoutedExperts(b"\0" * 16, 1, 4).extend(RoutedExperts(b"\0" * 16, 2, 2))


def _sample(routes: RoutedExperts | None) -> Sample:
    return Sample.build(
        prompt_tokens=[1, 2, 3],
        response_tokens=[4, 5],
        response_versions=["v1", "v1"],
        rollout_log_probs=[-0.5, -0.25],
        reward=1.0,
        group_id="g",
        parent_traj_id="t",
        routed_experts=routes,
    )


def test_routes_survive_the_segment_codec() -> None:
    routes = RoutedExperts.from_base64(_sglang_encoding(np.arange(16).reshape(4, 2, 2)), rows=4)
    sample = _sample(routes)
    record = sample_to_record(sample)
    assert record["routed_experts_rows"] == 4
    assert record_to_sample(record) == sample
    plain = _sample(None)
    assert sample_to_record(plain)["routed_experts"] is None
    assert record_to_sample(sample_to_record(plain)) == plain


def test_a_sample_holds_routes_of_its_own_tokens_only() -> None:
    with pytest.raises(ValueError, match="routed_experts has 6 rows for 5 tokens"):
        _sample(RoutedExperts(b"\0" * 24, 6, 1))


def test_bad_record_routes_name_the_field() -> None:
    record = sample_to_record(_sample(None))
    with pytest.raises(ValueError, match=r"'routed_experts': .*do not split into 4 rows"):
        record_to_sample(
            {
                **record,
                "routed_experts": base64.b64encode(b"\0" * 6).decode(),
                "routed_experts_rows": 4,
            }
        )
    with pytest.raises(ValueError, match="'routed_experts' must be a base64 string"):
        record_to_sample({**record, "routed_experts": [1, 2]})
