"""A LoRA job's generations name the current version's adapter and carry its version on every
token (`dressage.proxy.adapters`); the base version names none; an engine's own version does not
hold it out of routing."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dressage.proxy.adapters import LORA_PATH, name_adapter, stamped
from dressage.proxy.engine_pool import EnginePool
from dressage.proxy.generation import parse_piece


def _answer(n: int, version: str = "v0") -> dict[str, object]:
    return {
        "text": "",
        "output_ids": list(range(n)),
        "meta_info": {
            "finish_reason": {"type": "length", "length": n},
            "weight_version": version,
            "output_token_logprobs": [[-0.5, t, None] for t in range(n)],
        },
    }


def test_the_base_version_and_a_full_weight_job_name_no_adapter() -> None:
    body: dict[str, object] = {}
    assert name_adapter(body, "v0", "v0") is None
    assert name_adapter(body, "v3", None) is None
    assert name_adapter(body, None, "v0") is None
    assert body == {}


def test_a_later_version_is_named_as_sglangs_lora_path() -> None:
    body: dict[str, object] = {"input_ids": [1]}
    assert name_adapter(body, "v3", "v0") == "v3"
    assert body == {"input_ids": [1], LORA_PATH: "v3"}


@given(st.integers(min_value=0, max_value=50), st.sampled_from(["v1", "v7", "v12"]))
def test_every_token_of_a_piece_carries_the_adapter_it_ran_with(n: int, adapter: str) -> None:
    piece = stamped(parse_piece(_answer(n), "http://engine"), adapter)
    assert piece.versions == [adapter] * n
    assert sum(run.length for run in piece.runs) == n
    assert all(run.version == adapter for run in piece.runs)
    assert piece.weight_version == adapter
    assert piece.output_ids == list(range(n))


def test_without_an_adapter_the_engines_versions_stay() -> None:
    piece = parse_piece(_answer(3, "v0"), "http://engine")
    assert stamped(piece, None) is piece


def test_a_lora_pool_routes_engines_whatever_base_version_they_report() -> None:
    pool = EnginePool(["http://a"])
    pool["http://a"].weight_version = "v0"
    pool.target_version = "v4"
    assert not pool.routable(pool["http://a"])
    pool.adapters = True
    assert pool.routable(pool["http://a"])
