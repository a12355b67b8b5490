"""Segment records and their conversion into training samples (pure)."""

from __future__ import annotations

import pytest

from dressage.proxy.records import record_to_sample, sample_to_record, session_records
from dressage.proxy.sessions import SessionStore
from dressage.rollout.artifacts.samples import Sample


def _session_with_two_versions() -> SessionStore:
    store = SessionStore(ttl_s=60)
    session = store.get_or_create("traj-1", "prompt-7", 0.0)
    plan = session.begin_turn([1, 2], 0.0)
    session.commit_turn(plan, [10, 11, 12], [-0.1, -0.2, -0.3], ["v1", "v1", "v2"], 0.0,
                        preempts=1)  # fmt: skip
    plan = session.begin_turn([1, 2, 10, 11, 12, 5], 0.0)
    session.commit_turn(plan, [13], [-0.4], ["v2"], 0.0)
    return store


def test_record_holds_every_training_field_and_converts_to_a_sample() -> None:
    session = _session_with_two_versions().get("traj-1")
    assert session is not None
    session.close()
    (record,) = session_records(session, reward=1.5, record_token_versions=True)
    assert record["parent_traj_id"] == "traj-1"
    assert record["group_id"] == "prompt-7"
    assert record["segment_index"] == 0
    assert record["tokens"] == [1, 2, 10, 11, 12, 5, 13]
    assert record["loss_mask"] == [1, 1, 1, 0, 1]
    assert record["full_versions"] == [None, None, "v1", "v1", "v2", None, "v2"]
    assert record["version_spans"] == [[None, 2], ["v1", 2], ["v2", 1], [None, 1], ["v2", 1]]
    assert record["dressage_start_token_version"] == "v1"
    assert record["dressage_end_token_version"] == "v2"
    assert record["preempts"] == 1
    assert record["status"] == "finished"
    sample = record_to_sample(record)
    assert sample.tokens == (1, 2, 10, 11, 12, 5, 13)
    assert sample.rollout_log_probs == (-0.1, -0.2, -0.3, 0.0, -0.4)
    assert sample.reward == 1.5
    assert sample.parent_traj_id == "traj-1"
    assert sample.to_dict()["version_spans"] == record["version_spans"]


def test_records_and_their_samples_keep_the_raw_loss_mask() -> None:
    """Masking non-last-version tokens is the trainer's (`score_batch`), not the records'."""
    session = _session_with_two_versions().get("traj-1")
    assert session is not None
    session.close()
    (record,) = session_records(session, reward=None, record_token_versions=True)
    assert "mask_nonlast_version_tokens" not in record
    assert record["loss_mask"] == [1, 1, 1, 0, 1]
    assert record_to_sample(record).loss_mask == (1, 1, 1, 0, 1)


def test_without_recording_versions_are_null() -> None:
    session = _session_with_two_versions().get("traj-1")
    assert session is not None
    session.close()
    (record,) = session_records(session, reward=0.0, record_token_versions=False)
    assert set(record["full_versions"]) == {None}
    assert record["dressage_end_token_version"] is None


def test_sample_round_trip() -> None:
    sample = Sample.build(
        prompt_tokens=[4, 5],
        response_tokens=[6, 7],
        response_versions=["a", "b"],
        rollout_log_probs=[-1.0, -2.0],
        loss_mask=[1, 0],
        group_id="g",
        parent_traj_id="t",
        segment_index=3,
        reward=2.0,
    )
    assert record_to_sample(sample_to_record(sample)) == sample


def test_inconsistent_record_names_the_field() -> None:
    with pytest.raises(ValueError, match="loss_mask"):
        record_to_sample({"prompt_tokens": [1], "response_tokens": [2], "loss_mask": None,
                          "rollout_log_probs": [0.0]})  # fmt: skip
