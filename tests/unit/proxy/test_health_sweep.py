"""A health sweep of a large pool is spread out (`background.sweep`, pure: the checks and the
sleep are injected): at most `SWEEP_BATCH` probes at once, every engine probed exactly once,
the pauses adding up to under the spread; a small pool is probed all at once, as before."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from dressage.proxy.background import SWEEP_BATCH, sweep


@settings(max_examples=50, deadline=None)
@given(size=st.integers(0, 300), spread=st.floats(0.0, 10.0))
def test_every_engine_is_probed_once_in_batches_spread_over_the_interval(
    size: int, spread: float
) -> None:
    urls = [f"http://e{i}" for i in range(size)]
    probed: list[str] = []
    running = [0, 0]  # now, most at once
    slept: list[float] = []

    async def check(url: str) -> None:
        running[0] += 1
        running[1] = max(running[1], running[0])
        await asyncio.sleep(0)
        probed.append(url)
        running[0] -= 1

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    asyncio.run(sweep(urls, check, spread, sleep))
    assert sorted(probed) == sorted(urls)
    assert running[1] <= SWEEP_BATCH
    if size <= SWEEP_BATCH:
        assert slept == []
    else:
        assert len(slept) == (size - 1) // SWEEP_BATCH
        assert sum(slept) <= spread + 1e-9
