"""Rollout orchestration in a process of its own, behind the `Collector` protocol.

In one process, the rollout worker (the agents, the proxy's HTTP client, the reward) and the
trainer share one interpreter lock: every request the worker sends and every answer it parses
waits while the trainer's Python runs, and the other way round, so overlapping the two gains
little even when generation runs elsewhere. `RolloutProcessCollector` runs the job's collector
(`make_collector`, any rollout mode) in a child process started with `spawn` and talks to it
over a pipe; the training loop sees the same protocol as before.

The parent sends commands, the child answers each `next_batch` with the batch and what the
parent needs without asking again:

- `("load", state)`: the data position from the checkpoint (before the first batch);
- `("published", version)`: a new weight version is live on the engines;
- `("steer", concurrency, keep_versions)`: the staleness budget's controller changed the depth
  and the window (`AsyncRolloutCollector.steer`);
- `("next_batch",)`: answered by `("batch", batch, position, stats, faults)` or
  `("error", exception, faults)` (the batch's samples carry their reward parts and failures,
  `dressage.rollout.stats`), `faults` being the child's
  user-code faults so far (`dressage.tasks.faults`), which the parent takes into its own
  registry for the run's report;
- `("close",)`: the child closes its collector and answers `("closed", stats, faults)`.

`state_dict()` is the data position the child reported with the last batch: every group
trained so far was started before it, so a resumed run never trains on a prompt twice (groups
started after it were not trained and are started again). The child exits when the pipe
closes, so it never outlives a parent that died.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import pickle
import signal
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from dressage.data.groups import TrainBatch
from dressage.rollout.stats import CollectorStats
from dressage.tasks.faults import UserCodeFaults

CLOSE_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class RolloutRecipe:
    """What the child needs to build the job's collector: plain, picklable values."""

    job: Mapping[str, Any]
    """The job manifest (`AsyncRLJob.model_dump(mode="json", by_alias=True)`)."""
    model_dir: str
    """The trainer's initial model directory, for the prompt codec (tokenizer)."""
    proxy_url: str
    proxy_token: str | None = None
    cpus: Sequence[int] | None = None
    """Cores the child is pinned to (None: not pinned)."""
    task: Any = None
    """The job's task as the parent built it, when it reads a dataset (`DatasetTask`, pickled
    with its rows and its reward function), so the dataset is read and its bad rows logged
    once per run; None: the child builds the task from the job."""


class RolloutProcessFailed(RuntimeError):
    """The rollout process died or answered something the parent cannot use."""


class RolloutProcessCollector:
    """The `Collector` protocol, served by the job's collector in a child process."""

    def __init__(self, recipe: RolloutRecipe, faults: UserCodeFaults | None = None) -> None:
        """`faults`: the run's registry, which takes in the child's user-code faults."""
        self.stats = CollectorStats()
        self.faults = UserCodeFaults() if faults is None else faults
        self._position: dict[str, Any] = {}
        self._replies: asyncio.Queue[tuple[Any, ...] | None] | None = None
        self._closed = False
        context = multiprocessing.get_context("spawn")
        self._conn, child_conn = context.Pipe()
        self._process = context.Process(
            target=_child_main, args=(recipe, child_conn), name="dressage-rollout", daemon=True
        )
        self._process.start()
        child_conn.close()

    @property
    def pid(self) -> int | None:
        return self._process.pid

    # --- Collector protocol ---------------------------------------------------------------

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._position = dict(state)
        self._send(("load", dict(state)))

    def state_dict(self) -> dict[str, Any]:
        return dict(self._position)

    def on_weights_published(self, version: str) -> None:
        self._send(("published", version))

    def steer(self, concurrency: int, keep_versions: int) -> None:
        """Change the child collector's depth and window (`AsyncRolloutCollector.steer`)."""
        self._send(("steer", concurrency, keep_versions))

    async def next_batch(self) -> TrainBatch:
        if self._closed:
            from dressage.rollout.collector import CollectorClosed

            raise CollectorClosed("collector is closed")
        self._send(("next_batch",))
        reply = await self._receive()
        if reply[0] == "error":
            self.faults.absorb(reply[2])
            raise reply[1]
        if reply[0] != "batch":
            raise RolloutProcessFailed(f"rollout process answered {reply[0]!r} to next_batch")
        _, batch, position, stats, faults = reply
        self.faults.absorb(faults)
        self._position, self.stats = position, stats
        assert isinstance(batch, TrainBatch)
        return batch

    async def aclose(self) -> None:
        """Close the child's collector (its shutdown drops are counted) and end the child."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._process.is_alive():
                with contextlib.suppress(RolloutProcessFailed, asyncio.TimeoutError):
                    self._send(("close",))
                    await asyncio.wait_for(self._until_closed(), CLOSE_TIMEOUT_S)
        finally:
            await asyncio.to_thread(self._process.join, CLOSE_TIMEOUT_S)
            if self._process.is_alive():
                self._process.kill()
                await asyncio.to_thread(self._process.join, CLOSE_TIMEOUT_S)
            self._conn.close()

    async def _until_closed(self) -> None:
        # A batch asked for before an interrupted `next_batch` may still arrive first.
        while True:
            reply = await self._receive()
            if reply[0] == "closed":
                self.stats = reply[1]
                self.faults.absorb(reply[2])
                return

    # --- the pipe --------------------------------------------------------------------------

    def _send(self, message: tuple[Any, ...]) -> None:
        try:
            self._conn.send(message)
        except (OSError, ValueError) as exc:  # broken pipe, closed connection
            raise self._failed("cannot reach the rollout process") from exc

    async def _receive(self) -> tuple[Any, ...]:
        """The child's next reply, read by the one reader thread of this collector."""
        if self._replies is None:
            loop = asyncio.get_running_loop()
            self._replies = asyncio.Queue()
            reader = threading.Thread(
                target=self._read, args=(loop, self._replies), name="rollout-replies", daemon=True
            )
            reader.start()
        reply = await self._replies.get()
        if reply is None:
            raise self._failed("the rollout process exited")
        return reply

    def _read(self, loop: asyncio.AbstractEventLoop, replies: asyncio.Queue[Any]) -> None:
        while True:
            try:
                reply = self._conn.recv()
            except (EOFError, OSError):
                reply = None
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(replies.put_nowait, reply)
            if reply is None or reply[0] == "closed":
                return

    def _failed(self, what: str) -> RolloutProcessFailed:
        self._process.join(timeout=1.0)
        return RolloutProcessFailed(f"{what} (exit code {self._process.exitcode})")


# --- the child -------------------------------------------------------------------------------


def _child_main(recipe: RolloutRecipe, conn: Connection) -> None:
    """Entry point of the rollout process.

    Ctrl-C in a terminal reaches the whole process group; the parent decides when rollout
    stops (it sends `close`), so the child ignores SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if recipe.cpus is not None:
        os.sched_setaffinity(0, set(recipe.cpus))
    try:
        import uvloop
    except ImportError:
        asyncio.run(_serve(recipe, conn))
    else:
        uvloop.run(_serve(recipe, conn))


async def _serve(recipe: RolloutRecipe, conn: Connection) -> None:
    from dressage.api.job import AsyncRLJob
    from dressage.orchestrator.collectors import make_collector
    from dressage.proxy.client import ProxyRolloutClient
    from dressage.rollout.collector import AsyncRolloutCollector
    from dressage.tasks import get_task
    from dressage.tasks.codec import PromptCodec, TaskPrompts

    job = AsyncRLJob.model_validate(dict(recipe.job))
    task = recipe.task if recipe.task is not None else get_task(job.spec.task)
    proxy = ProxyRolloutClient(recipe.proxy_url, token=recipe.proxy_token)
    source = TaskPrompts(task, PromptCodec.from_pretrained(Path(recipe.model_dir)))
    faults = UserCodeFaults()  # this process's; its entries go to the parent's registry
    collector = make_collector(
        job.spec, source=source, proxy=proxy, run_tag=job.metadata.name, faults=faults
    )
    commands: asyncio.Queue[tuple[Any, ...] | None] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    reader = loop.run_in_executor(None, _read_commands, conn, loop, commands)
    batch_task: asyncio.Task[TrainBatch] | None = None
    try:
        while True:
            command = await commands.get()
            if command is None or command[0] == "close":
                break
            kind = command[0]
            if kind == "load":
                collector.load_state_dict(command[1])
            elif kind == "published":
                collector.on_weights_published(command[1])
            elif kind == "steer" and isinstance(collector, AsyncRolloutCollector):
                collector.steer(command[1], command[2])
            elif kind == "next_batch":
                # Served in the background so that a publish arriving meanwhile reaches the
                # collector at once.
                batch_task = asyncio.create_task(collector.next_batch())
                batch_task.add_done_callback(lambda t: _reply_batch(conn, t, collector, faults))
    finally:
        if batch_task is not None and not batch_task.done():
            batch_task.cancel()
            with contextlib.suppress(BaseException):
                await batch_task
        await collector.aclose()
        await proxy.aclose()
        with contextlib.suppress(OSError, ValueError):
            conn.send(("closed", collector.stats.snapshot(), faults.entries()))
        conn.close()
        with contextlib.suppress(BaseException):
            await reader


def _read_commands(
    conn: Connection, loop: asyncio.AbstractEventLoop, commands: asyncio.Queue[Any]
) -> None:
    """Forward the parent's commands to the event loop until `close` or the pipe ends."""
    while True:
        try:
            command = conn.recv()
        except (EOFError, OSError):
            loop.call_soon_threadsafe(commands.put_nowait, None)
            return
        loop.call_soon_threadsafe(commands.put_nowait, command)
        if command[0] == "close":
            return


def _reply_batch(
    conn: Connection, task: asyncio.Task[TrainBatch], collector: Any, faults: UserCodeFaults
) -> None:
    if task.cancelled():
        return
    error = task.exception()
    if error is not None:
        conn.send(("error", _picklable(error), faults.entries()))
        return
    conn.send(
        (
            "batch",
            task.result(),
            collector.state_dict(),
            collector.stats.snapshot(),
            faults.entries(),
        )
    )


def _picklable(error: BaseException) -> BaseException:
    """`error` if it survives pickling, else a `RolloutProcessFailed` carrying its text."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return RolloutProcessFailed(f"{type(error).__name__}: {error}")
    return error
