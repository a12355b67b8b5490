"""The table of SGLang release facts (`dressage.api.sglang.FEATURES`) says what
`scripts/sglang_release_facts.py` found when it read every release's source: each fact's
`since` is the first release on the package index that has it (committed in
`scripts/sglang_release_facts.json`; rerun the script with `--write` after a release moves
the matrix, then fix the table). This test reads the committed file; it downloads nothing."""

from __future__ import annotations

import json
from pathlib import Path

from dressage.api.sglang import (
    FEATURES,
    ROUTED_EXPERTS_START_LEN,
    SAMPLING_PARAM_KEYS,
    SGLANG_NEWEST_TESTED,
    SGLANG_OLDEST_TESTED,
    STOP_REGEX,
    at_least,
    release_order,
    sampling_keys_of,
    supports,
)

FACTS = json.loads(
    (Path(__file__).parents[3] / "scripts" / "sglang_release_facts.json").read_text()
)


def test_each_fact_arrives_in_the_release_the_script_found() -> None:
    table = {name: feature.since for name, feature in FEATURES.items()}
    assert table == FACTS["first_release"]


def test_the_script_walked_the_supported_range() -> None:
    walked = FACTS["releases"]
    assert walked[0] == SGLANG_OLDEST_TESTED
    assert walked[-1] == SGLANG_NEWEST_TESTED
    assert walked == sorted(walked, key=release_order)


def test_a_release_between_the_tested_ones_gets_what_its_source_has() -> None:
    """0.5.15.post1, outside the matrix, already has `routed_experts_start_len` (its
    `GenerateReqInput` field, from 0.5.8 on); the table once said 0.5.19."""
    assert supports("0.5.15.post1", ROUTED_EXPERTS_START_LEN)
    assert not supports("0.5.7", ROUTED_EXPERTS_START_LEN)


def test_a_post_release_comes_after_its_base() -> None:
    """`stop_regex` arrived in 0.5.3.post2: 0.5.3 and 0.5.3.post1 lack it."""
    assert STOP_REGEX.since == "0.5.3.post2"
    assert not supports("0.5.3", STOP_REGEX)
    assert not supports("0.5.3.post1", STOP_REGEX)
    assert supports("0.5.3.post2", STOP_REGEX)
    assert supports("v0.5.4", STOP_REGEX)
    assert release_order("0.5.15.post1") == (0, 5, 15, 1)
    assert at_least("0.5.15.post1", "0.5.15")
    assert not at_least("0.5.15", "0.5.15.post1")


def test_the_sampling_keys_come_from_the_table() -> None:
    later = {key: f for key, f in SAMPLING_PARAM_KEYS.items() if f is not None}
    assert all(FEATURES[f.name] is f for f in later.values())
    oldest = set(sampling_keys_of(SGLANG_OLDEST_TESTED))
    newest = set(sampling_keys_of(SGLANG_NEWEST_TESTED))
    assert newest - oldest == set(later)
    assert set(sampling_keys_of("0.5.19")) - oldest == {"sampling_seed", "stop_regex", "beam_width"}


def test_metric_labels_of_any_release_come_from_the_table() -> None:
    """SGLang's metric labels are release facts too ("from release X"): 0.5.19, between the
    tested releases, has the newest's labels; 0.5.10 lacks the tokenizer's engine_type (0.5.11)
    and is_streaming (0.5.17); 0.5.6.post2 lacks moe_ep_rank (0.5.7)."""
    from dressage.metrics.sglang import release_labels

    scheduler = ("model_name", "engine_type", "tp_rank", "pp_rank")
    assert release_labels("0.5.19") == release_labels(SGLANG_NEWEST_TESTED)
    assert release_labels("0.5.19").scheduler == (*scheduler, "moe_ep_rank")
    assert release_labels("0.5.19").tokenizer == ("model_name", "engine_type")
    assert release_labels("0.5.19").per_request == ("is_streaming",)
    assert release_labels("0.5.10").tokenizer == ("model_name",)
    assert release_labels("0.5.16").per_request == ()
    assert release_labels("0.5.6.post2").scheduler == scheduler
    assert release_labels(SGLANG_OLDEST_TESTED).scheduler == scheduler
