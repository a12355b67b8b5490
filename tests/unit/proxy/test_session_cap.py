"""The proxy's live sessions are bounded by construction (`SessionStore.max_sessions`): a new
session at the cap takes the place of the least recently used session idle for
`evict_idle_s` (counted), and is refused 429 `too_many_sessions` with `Retry-After` when every
live session is busy or in recent use; a live trajectory is never evicted (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dressage.proxy import errors
from dressage.proxy.errors import ProxyError
from dressage.proxy.sessions import SessionStore


def test_a_new_session_at_the_cap_evicts_the_least_recently_used_idle_one() -> None:
    store = SessionStore(ttl_s=3600, max_sessions=2, evict_idle_s=10)
    evictions: list[None] = []
    store.on_evict = lambda: evictions.append(None)
    store.get_or_create("a", None, now=0)
    store.get_or_create("b", None, now=1)
    store.get_or_create("a", None, now=2)  # used again: "b" is now the least recently used
    store.get_or_create("c", None, now=20)
    assert store.get("b") is None
    assert store.get("a") is not None
    assert store.get("c") is not None
    assert store.evicted == 1
    assert len(evictions) == 1


def test_at_the_cap_with_no_abandoned_session_a_new_one_is_refused_429_with_retry_after() -> None:
    store = SessionStore(ttl_s=3600, max_sessions=2, evict_idle_s=60)
    store.get_or_create("a", None, now=0).begin_turn([1], now=0)  # busy: never evicted
    store.get_or_create("b", None, now=0)
    with pytest.raises(ProxyError) as refused:
        store.get_or_create("c", None, now=30)  # "b" idle 30 s < 60 s
    assert refused.value.status == 429
    assert refused.value.name == errors.TOO_MANY_SESSIONS
    assert refused.value.headers is not None
    assert int(refused.value.headers["Retry-After"]) >= 1
    assert len(store) == 2
    store.get_or_create("c", None, now=61)  # now "b" is abandoned
    assert store.get("b") is None
    assert store.get("a") is not None


def test_max_sessions_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_sessions"):
        SessionStore(ttl_s=1, max_sessions=0)


ops = st.lists(
    st.tuples(
        st.sampled_from(["open", "turn", "finish", "finalize"]),
        st.integers(min_value=0, max_value=30),
        st.integers(min_value=0, max_value=40),
    ),
    max_size=120,
)


@settings(max_examples=150, deadline=None)
@given(cap=st.integers(min_value=1, max_value=6), evict_idle=st.integers(0, 20), steps=ops)
def test_live_sessions_never_exceed_the_cap_and_busy_ones_are_never_evicted(
    cap: int, evict_idle: int, steps: list[tuple[str, int, int]]
) -> None:
    store = SessionStore(ttl_s=10_000, max_sessions=cap, evict_idle_s=evict_idle)
    now = 0.0
    busy: set[str] = set()
    for op, sid_number, dt in steps:
        now += dt
        sid = f"s{sid_number}"
        try:
            if op == "open":
                store.get_or_create(sid, None, now)
            elif op == "turn" and sid not in busy:
                store.get_or_create(sid, None, now).begin_turn([1], now)
                busy.add(sid)
            elif op == "finish" and sid in busy:
                session = store.get(sid)
                assert session is not None  # a busy session is never evicted
                session.end_turn(now)
                busy.discard(sid)
            elif op == "finalize" and sid not in busy and store.get(sid) is not None:
                store.finalize(sid, [], now)
        except ProxyError as exc:
            refusal = exc.name
            if refusal == errors.SESSION_FINALIZED:  # a finalized id reused: not the cap's
                continue
            assert refusal == errors.TOO_MANY_SESSIONS
            assert len(store) == cap
            idle = [
                s for s in (store.get(f"s{i}") for i in range(31)) if s is not None and not s.busy
            ]
            assert all(now - s.last_active < evict_idle for s in idle)
        assert len(store) <= cap
        for sid_busy in busy:
            assert store.get(sid_busy) is not None
