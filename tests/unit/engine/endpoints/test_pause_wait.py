"""`wait_unpaused`: a generation that arrives while generation is paused waits until a
continue that is still in force when it wakes, or until its client goes away."""

from __future__ import annotations

import asyncio

from dressage.engine.embedded.endpoints.generation import wait_unpaused


async def _settle() -> None:
    """Let every ready task run (a handful of loop turns)."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_pause_that_ends_and_starts_again_before_the_request_wakes_keeps_it_waiting() -> (
    None
):
    """Pause, continue, pause in one turn of the loop: SGLang's
    `is_pause_cond.wait_for(lambda: not self.is_pause)` checks the flag again on waking, so
    the request waits on; the next continue lets it through."""
    unpaused = asyncio.Event()
    never_gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    waiting = asyncio.create_task(wait_unpaused(unpaused, never_gone))
    await _settle()
    unpaused.set()
    unpaused.clear()
    await _settle()
    assert not waiting.done()
    unpaused.set()
    assert await asyncio.wait_for(waiting, 5) is True
    assert never_gone.cancelled()  # the wait stops watching for the client going away


async def test_a_client_that_goes_away_while_paused_ends_the_wait() -> None:
    unpaused = asyncio.Event()
    gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    waiting = asyncio.create_task(wait_unpaused(unpaused, gone))
    await _settle()
    gone.set_result(None)
    assert await asyncio.wait_for(waiting, 5) is False


async def test_an_engine_that_is_not_paused_lets_the_request_through_at_once() -> None:
    unpaused = asyncio.Event()
    unpaused.set()
    gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    assert await wait_unpaused(unpaused, gone) is True
