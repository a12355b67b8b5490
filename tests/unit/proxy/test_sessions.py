"""Session and segment state: prefix consistency, segments, versions, expiry (pure)."""

from __future__ import annotations

import pytest

from dressage.proxy.errors import ProxyError
from dressage.proxy.sessions import SessionStore


def _turn(store: SessionStore, sid: str, input_ids: list[int], out: list[int], version: str,
          now: float = 0.0, force: str | None = None) -> int:  # fmt: skip
    session = store.get_or_create(sid, "inst", now)
    plan = session.begin_turn(input_ids, now, force_new_segment=force)
    seg = session.commit_turn(plan, out, [-0.5] * len(out), [version] * len(out), now)
    return seg.index


def test_extending_turns_stay_in_one_segment_with_env_tokens_masked() -> None:
    store = SessionStore(ttl_s=60)
    assert _turn(store, "s", [1, 2, 3], [10, 11], "v1") == 0
    assert _turn(store, "s", [1, 2, 3, 10, 11, 7, 8], [12], "v1") == 0
    session = store.get("s")
    assert session is not None
    assert session.current is not None
    seg = session.current
    assert seg.prompt_tokens == [1, 2, 3]
    assert seg.response_tokens == [10, 11, 7, 8, 12]
    assert seg.loss_mask == [1, 1, 0, 0, 1]
    assert seg.versions == ["v1", "v1", None, None, "v1"]
    assert seg.logprobs == [-0.5, -0.5, 0.0, 0.0, -0.5]
    assert seg.turns == 2


def test_history_rewrite_and_forced_change_start_new_segments() -> None:
    store = SessionStore(ttl_s=60)
    _turn(store, "s", [1, 2, 3], [10], "v1")
    assert _turn(store, "s", [1, 9, 3, 10, 4], [11], "v1") == 1
    assert _turn(store, "s", [1, 9, 3, 10, 4, 11, 5], [12], "v1", force="tools_changed") == 2
    session = store.get("s")
    assert session is not None
    assert [s.closed_reason for s in session.segments] == ["history_rewrite", "tools_changed", None]
    assert session.segments[1].prompt_tokens == [1, 9, 3, 10, 4]
    assert session.close()[-1].closed_reason == "finalized"


def test_shorter_input_is_a_rewrite_and_equal_input_continues() -> None:
    store = SessionStore(ttl_s=60)
    _turn(store, "s", [1, 2], [3], "v1")
    session = store.get("s")
    assert session is not None
    assert session.plan_turn([1, 2, 3]).new_segment is None
    assert session.plan_turn([1, 2, 3]).appended == ()
    assert session.plan_turn([1, 2]).new_segment == "history_rewrite"


def test_versions_seen_in_observation_order_across_segments() -> None:
    store = SessionStore(ttl_s=60)
    _turn(store, "s", [1], [2], "7")
    _turn(store, "s", [5], [6], "3")
    _turn(store, "s", [5, 6], [8], "7")
    session = store.get("s")
    assert session is not None
    assert session.versions_seen == ["7", "3"]


def test_one_generation_at_a_time_and_refusal_sticks() -> None:
    store = SessionStore(ttl_s=60)
    session = store.get_or_create("s", None, 0.0)
    session.begin_turn([1], 0.0)
    with pytest.raises(ProxyError) as busy:
        session.begin_turn([1], 0.0)
    assert busy.value.name == "session_busy"
    refusal = ProxyError(502, "partial_rollout_staleness_exceeded", "too many versions")
    session.refuse(refusal, 1.0)
    with pytest.raises(ProxyError) as again:
        session.begin_turn([1], 2.0)
    assert again.value is refusal


def test_expiry_uses_the_injected_clock_and_spares_busy_sessions() -> None:
    store = SessionStore(ttl_s=10)
    store.get_or_create("idle", None, 0.0)
    busy = store.get_or_create("busy", None, 0.0)
    busy.begin_turn([1], 0.0)
    assert store.expire(10.0) == []
    assert [s.session_id for s in store.expire(10.5)] == ["idle"]
    assert store.get("busy") is not None


def test_finalized_records_are_read_by_instance_and_drained() -> None:
    store = SessionStore(ttl_s=10)
    store.get_or_create("a", "i1", 0.0)
    store.get_or_create("b", "i2", 0.0)
    store.finalize("a", [{"x": 1}], 1.0)
    store.finalize("b", [{"x": 2}, {"x": 3}], 1.0)
    assert store.read_finished("i2", drain=False) == [{"x": 2}, {"x": 3}]
    assert store.read_finished(None, drain=True) == [{"x": 1}, {"x": 2}, {"x": 3}]
    assert store.read_finished(None, drain=True) == []


def test_finalized_id_cannot_be_reused_until_read() -> None:
    store = SessionStore(ttl_s=10)
    store.get_or_create("a", None, 0.0)
    store.finalize("a", [], 0.0)
    with pytest.raises(ProxyError) as info:
        store.get_or_create("a", None, 1.0)
    assert info.value.name == "session_finalized"
    store.expire(20.0)
    assert store.get_or_create("a", None, 21.0).turns == 0
