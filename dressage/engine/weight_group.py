"""A weight-update process group: the trainer (rank 0) and the engines' ranks, outside any
default `torch.distributed` group.

SGLang's `/init_weights_update_group` joins a group of `world_size` ranks whose rendezvous is a
`TCPStore` served by rank 0 at `master_address:master_port`; the engine takes rank
`rank_offset` (plus its tensor-parallel rank), the trainer rank 0, and rank 0 then broadcasts
each weight tensor to everyone. Neither side may need a default process group: the trainer
has its own (FSDP) one with other ranks, and the embedded engine has none at all.

So the group is built here from public `torch.distributed` classes alone, with no global
registration: the store, then `ProcessGroupGloo` or `ProcessGroupNCCL` constructed directly on
it, and collectives called on that backend object. A process can hold any number of such
groups (a trainer talking to several engine fleets) and drop one without touching the others.
The store keys are the ones `torch.distributed` uses for a group built by
`_new_process_group_helper` from a `PrefixStore(group_name, store)` (what SGLang's
`init_custom_process_group` does, read in v0.5.2 `srt/utils.py`): prefixes `group_name`, then
`group_name/`, then the device type (`cpu/` for gloo, `cuda/` for NCCL), and the sequence
number that helper sets; a real SGLang engine and this module therefore meet in one group.

Gloo runs on CPU (the embedded engine, tests); NCCL on GPU (SGLang engines). The same calls
serve both.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import datetime
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch
import torch.distributed as dist

# The classes `torch.distributed` re-exports, imported from where they are typed.
from torch._C._distributed_c10d import BroadcastOptions, PrefixStore, ProcessGroupGloo, TCPStore

from dressage.engine.protocol import DEFAULT_WEIGHTS_GROUP

T = TypeVar("T")

BACKENDS = ("gloo", "nccl")
DEFAULT_GROUP_NAME = DEFAULT_WEIGHTS_GROUP
"""SGLang's default `group_name`."""
DEFAULT_TIMEOUT_S = 600.0
"""Bound on the rendezvous and on every collective (a rank that never joins fails the rest)."""
THREAD_NAME = "weight-group"
"""The name of the threads `in_daemon_thread` starts."""

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
"""The weight dtypes a distributed update may carry, by the names SGLang reads
(`getattr(torch, name)`)."""


def dtype_name(dtype: torch.dtype) -> str:
    """`torch.bfloat16` -> `"bfloat16"`, the spelling the request's `dtypes` use."""
    return str(dtype).removeprefix("torch.")


class WeightUpdateGroup:
    """One rank's membership of a weight-update group.

    Construction blocks until every rank has joined (or `timeout_s` passes, or the store
    stops serving): rank 0's process serves the store, so it must be started before, or
    concurrently with, the other ranks.
    """

    def __init__(
        self,
        *,
        master_address: str,
        master_port: int,
        rank: int,
        world_size: int,
        group_name: str = DEFAULT_GROUP_NAME,
        backend: str = "gloo",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        store: TCPStore | None = None,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend: {backend!r} is not one of {list(BACKENDS)}")
        if world_size < 2:
            raise ValueError(
                f"world_size: a weight-update group needs >= 2 ranks, got {world_size}"
            )
        if not 0 <= rank < world_size:
            raise ValueError(f"rank: {rank} is outside [0, {world_size})")
        if not group_name:
            raise ValueError("group_name: must not be empty")
        if backend == "nccl" and not (torch.cuda.is_available() and dist.is_nccl_available()):
            raise ValueError("backend: nccl needs a GPU; this process has none (use gloo)")
        self.rank = rank
        self.world_size = world_size
        self.group_name = group_name
        self.backend = backend
        timeout = datetime.timedelta(seconds=timeout_s)
        if store is None:
            store = open_store(master_address, master_port, world_size, rank == 0, timeout_s)
        self.store = store
        device = "cuda" if backend == "nccl" else "cpu"
        prefixed = PrefixStore(
            f"{device}/", PrefixStore(f"{group_name}/", PrefixStore(group_name, store))
        )
        # ProcessGroupGloo or ProcessGroupNCCL (absent from CPU-only torch builds).
        self._backend: Any
        if backend == "gloo":
            self._backend = ProcessGroupGloo(prefixed, rank, world_size, timeout)
        else:
            nccl = dist.ProcessGroupNCCL
            options = nccl.Options()
            options.is_high_priority_stream = False
            options._timeout = timeout
            self._backend = nccl(prefixed, rank, world_size, options)
        self._backend._set_sequence_number_for_group()
        self._lock = threading.Lock()
        """Serialises broadcasts: each rank must issue them in the same order."""

    def broadcast(
        self,
        tensors: Sequence[torch.Tensor],
        arrived: Callable[[int, torch.Tensor], None] | None = None,
    ) -> None:
        """Broadcast `tensors` from rank 0 into every rank's tensors of the same shapes and
        dtypes, in order; blocks until all have arrived. Rank 0 sends, the others receive.

        `arrived(i, tensor)` is called as soon as tensor `i` is complete, while the later
        ones are still in flight, so a receiver can convert each one during the transfer.
        """
        with self._lock:
            backend = self._backend
            if backend is None:
                raise RuntimeError(f"weight-update group {self.group_name!r} is closed")
            works = []
            for tensor in tensors:
                options = BroadcastOptions()
                options.rootRank = 0
                options.rootTensor = 0
                works.append(backend.broadcast([tensor], options))
            for i, work in enumerate(works):
                work.wait()
                if arrived is not None:
                    arrived(i, tensors[i])

    def close(self) -> None:
        """Leave the group; later broadcasts fail. Idempotent, and it does not wait for a
        broadcast in flight (that one ends when it completes or times out)."""
        backend, self._backend = self._backend, None
        if backend is not None and self.backend == "nccl":
            backend.shutdown()

    @property
    def closed(self) -> bool:
        return self._backend is None


async def in_daemon_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Await `fn(*args, **kwargs)` run in a thread of its own that does not keep the process
    alive: a rendezvous or broadcast waiting on a rank that never comes cannot be interrupted,
    and must not hold up the event loop's shutdown (as the default executor's threads would)
    until its timeout. When the awaiting side is cancelled meanwhile (its request or its
    server went away), the thread's late outcome has nobody to go to and is dropped."""
    done: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                done.set_exception(exc)
        else:
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                done.set_result(result)

    threading.Thread(target=run, name=THREAD_NAME, daemon=True).start()
    return await asyncio.wrap_future(done)


def open_store(
    master_address: str, master_port: int, world_size: int, is_master: bool, timeout_s: float
) -> TCPStore:
    """The group's rendezvous store: served by rank 0 on `master_port` (0 picks a free port,
    read back from `.port`), reached by the others at `master_address:master_port`.

    The server lives as long as the store object that serves it (`is_master`); when it stops,
    every rank still waiting in it (in this process or another) fails at once ("Connection was
    likely closed"), which is the only way to end a rendezvous a rank will never complete."""
    if not master_address:
        raise ValueError("master_address: must not be empty")
    if not (0 <= master_port < 65536) or (master_port == 0 and not is_master):
        raise ValueError(f"master_port: {master_port} is not a usable TCP port")
    return TCPStore(
        master_address,
        master_port,
        world_size,
        is_master,
        datetime.timedelta(seconds=timeout_s),
        wait_for_workers=False,
    )
