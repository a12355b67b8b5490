"""The model-update lock: an update waits for running generations, and generations that
arrive meanwhile wait behind it (writer preference, as SGLang's `RWLock`)."""

from __future__ import annotations

import asyncio

from dressage.engine.embedded.update_lock import ModelUpdateLock


async def test_a_writer_waits_for_readers_and_new_readers_wait_for_the_writer() -> None:
    lock = ModelUpdateLock()
    order: list[str] = []
    reading = asyncio.Event()
    release_reader = asyncio.Event()

    async def generation(name: str, hold: asyncio.Event | None = None) -> None:
        async with lock.reading():
            order.append(f"{name} in")
            reading.set()
            if hold is not None:
                await hold.wait()
        order.append(f"{name} out")

    async def update() -> None:
        async with lock.writing():
            order.append("update")

    first = asyncio.create_task(generation("first", release_reader))
    await reading.wait()
    writer = asyncio.create_task(update())
    await asyncio.sleep(0)  # the writer is waiting now
    late = asyncio.create_task(generation("late"))
    await asyncio.sleep(0)
    assert order == ["first in"]
    assert lock.busy
    release_reader.set()
    await asyncio.gather(first, writer, late)
    assert order == ["first in", "first out", "update", "late in", "late out"]
    assert not lock.busy
    await lock.wait_idle()


async def test_a_cancelled_writer_lets_the_readers_it_held_back_in() -> None:
    lock = ModelUpdateLock()
    held = asyncio.Event()

    async def long_read() -> None:
        async with lock.reading():
            await held.wait()

    reader = asyncio.create_task(long_read())
    await asyncio.sleep(0)

    async def write() -> None:
        async with lock.writing():
            pass

    writer = asyncio.create_task(write())
    await asyncio.sleep(0)
    waiting = asyncio.create_task(long_read())
    await asyncio.sleep(0)
    writer.cancel()
    await asyncio.gather(writer, return_exceptions=True)
    await asyncio.sleep(0)
    assert lock.readers == 2  # the held-back reader got in once the writer gave up
    held.set()
    await asyncio.gather(reader, waiting)
