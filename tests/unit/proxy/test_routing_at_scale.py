"""Routing at fleet scale (`EnginePool.pick`, pure): a pick returns a routable engine not
excluded whenever there is one, the least loaded exactly in a small pool (ties to each engine in
turn, so a fleet below capacity is loaded evenly), and in a large pool by two random choices,
which keeps the busiest engine near the mean without a scan of every engine per request."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dressage.proxy.engine_pool import EXACT_PICK_UP_TO, EnginePool
from dressage.proxy.errors import ProxyError

engines = st.lists(
    st.tuples(st.integers(0, 5), st.booleans(), st.booleans()), min_size=1, max_size=64
)


@settings(max_examples=200, deadline=None)
@given(engines=engines, picks=st.integers(1, 5))
def test_a_pick_is_routable_and_in_a_small_pool_the_least_loaded(
    engines: list[tuple[int, bool, bool]], picks: int
) -> None:
    pool = EnginePool([f"http://e{i}" for i in range(len(engines))], seed=0)
    for engine, (inflight, healthy, _) in zip(pool.engines, engines, strict=True):
        engine.inflight, engine.healthy = inflight, healthy
    exclude = frozenset(e.url for e, (_, _, out) in zip(pool.engines, engines, strict=True) if out)
    candidates = [e for e in pool.engines if e.healthy and e.url not in exclude]
    for _ in range(picks):
        if not candidates:
            with pytest.raises(ProxyError):
                pool.pick(exclude=exclude)
            continue
        chosen = pool.pick(exclude=exclude)
        assert chosen in candidates
        if len(pool.engines) <= EXACT_PICK_UP_TO:
            assert chosen.inflight == min(e.inflight for e in candidates)


def test_ties_go_to_each_engine_in_turn() -> None:
    pool = EnginePool([f"http://e{i}" for i in range(4)], seed=0)
    assert [pool.pick().url for _ in range(8)] == [f"http://e{i % 4}" for i in range(8)]


def test_an_idle_large_pool_is_loaded_in_turn() -> None:
    """Generations that finish before the next arrives: each engine gets one before any
    gets two (the two random choices alone would pile several on some and none on others)."""
    pool = EnginePool([f"http://e{i}" for i in range(1024)], seed=0)
    picked = [pool.pick().url for _ in range(1024)]
    assert len(set(picked)) == 1024


@pytest.mark.parametrize("size", [64, 1024])
def test_two_choices_keep_the_busiest_engine_near_the_mean(size: int) -> None:
    pool = EnginePool([f"http://e{i}" for i in range(size)], seed=0)
    for _ in range(8 * size):
        pool.pick().inflight += 1
    loads = [e.inflight for e in pool.engines]
    assert max(loads) <= 8 + 3
    assert min(loads) >= 8 - 4
