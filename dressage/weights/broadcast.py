"""The trainer's side of distributed weight sync: broadcast new weights to the engines over a
`torch.distributed` group instead of writing a checkpoint every engine re-reads.

The trainer is rank 0 of a weight-update group (`dressage.engine.weight_group`); each engine
joins it through SGLang's `/init_weights_update_group` at its own rank offset (an SGLang engine
with tensor parallelism N takes N ranks). A publish is then:

1. `/begin_weight_update` on every engine whose release has weight-update sessions (0.5.23
   refuses a distributed update outside one; an older release answers 404 and needs none);
2. a sequence of buckets: for each, one `POST /update_weights_from_distributed {names, dtypes,
   shapes}` per engine, outstanding while rank 0 broadcasts the bucket. Where every engine's
   release takes `load_format: flattened_bucket` (0.5.23), the bucket goes as one uint8
   broadcast of its tensors' bytes back to back (`dressage.engine.flat_bucket`, SGLang's
   `FlattenedTensorBucket` layout; a tensor that would start at an offset its dtype cannot be
   read from starts the next bucket instead), else as one broadcast per tensor in the same
   order. The engine answers once it has received and loaded them. The last bucket carries the
   weight version, so an engine's label changes only when all its weights are new;
3. `/end_weight_update` on the engines that opened a session (also after a failed bucket);
4. one cache flush per engine (`/flush_cache`): no bucket flushes by itself, since 0.5.23
   refuses an update's flush while requests run (an `in_place` pause holds them) and then
   keeps the old version label.

Generation must be paused around a publish (an engine loads each bucket as it arrives, as
SGLang does): the caller pauses, sends, continues.

Memory: the `(name, tensor)` iterator is consumed lazily; at most one bucket (up to
`bucket_bytes`, or a single larger tensor) plus the next tensor are held at once, never a full
copy of the model. NCCL on GPU (SGLang engines), gloo on CPU (the embedded engine): the same
code, only `backend` differs.

A bucket an engine refuses (a parameter it does not have, a wrong shape) is still received by
it and dropped, so the group stays usable; `send` then raises `WeightSyncError` naming the
engine and the parameter, and sends no further buckets. The weights sent before that are loaded:
publish the whole set again (or fall back to a disk update) before continuing generation.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterable, Iterator, Sequence

import torch
from torch._C._distributed_c10d import TCPStore

from dressage.engine import flat_bucket
from dressage.engine.client import EngineClient
from dressage.engine.errors import EngineError
from dressage.engine.weight_group import (
    BACKENDS,
    DEFAULT_GROUP_NAME,
    DEFAULT_TIMEOUT_S,
    DTYPES,
    WeightUpdateGroup,
    dtype_name,
    in_daemon_thread,
    open_store,
)

DEFAULT_BUCKET_BYTES = 512 * 1024 * 1024
"""Bucket size: large enough that per-request overhead is small next to the transfer, small
enough that one bucket's staging memory on the engine is modest."""


class WeightSyncError(RuntimeError):
    """A weight-update group could not be formed, or an engine refused or lost a bucket."""


@dataclasses.dataclass(frozen=True)
class SendReport:
    """What one `send` moved."""

    buckets: int
    tensors: int
    bytes: int
    seconds: float
    flattened: bool = False
    """Whether the buckets went as one flattened broadcast each."""


def buckets(
    named_tensors: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int, *, aligned: bool = False
) -> Iterator[tuple[list[tuple[str, torch.Tensor]], bool]]:
    """Group `named_tensors` into runs of at most `bucket_bytes` (a larger tensor alone), each
    with whether it is the last; consumes the iterator lazily, one tensor ahead. `aligned`:
    also start a new run where a tensor would begin at a byte offset its dtype cannot be read
    from in a flattened bucket."""
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes: must be > 0, got {bucket_bytes}")
    current: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in named_tensors:
        nbytes = tensor.numel() * tensor.element_size()
        misaligned = aligned and not flat_bucket.aligned(size, tensor.dtype)
        if current and (size + nbytes > bucket_bytes or misaligned):
            yield current, False
            current, size = [], 0
        current.append((name, tensor))
        size += nbytes
    if current:
        yield current, True


def staged(name: str, tensor: torch.Tensor, backend: str) -> torch.Tensor:
    """`tensor` ready to broadcast over `backend` (on the GPU for NCCL, contiguous), its dtype
    one a distributed update may carry."""
    if dtype_name(tensor.dtype) not in DTYPES:
        raise WeightSyncError(
            f"{name}: dtype {dtype_name(tensor.dtype)} is not one of {sorted(DTYPES)}"
        )
    device = "cuda" if backend == "nccl" else "cpu"
    return tensor.detach().to(device).contiguous()


def _close_formed_group(task: asyncio.Future[WeightUpdateGroup]) -> None:
    if not task.cancelled() and task.exception() is None:
        task.result().close()


class DistributedWeightSender:
    """Rank 0 of a weight-update group with `engines`; broadcasts weights to all of them."""

    def __init__(
        self,
        engines: Sequence[EngineClient | str],
        *,
        master_address: str,
        master_port: int = 0,
        backend: str = "nccl",
        group_name: str = DEFAULT_GROUP_NAME,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        ranks_per_engine: int | Sequence[int] = 1,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        store: TCPStore | None = None,
    ) -> None:
        """`master_address` is where the engines reach this process (an address of the
        trainer's pod or host they can route to); `master_port` the TCP port the group's store
        listens on there (0: a free one, fine when engines share the host). `ranks_per_engine`
        is each engine's tensor-parallel size (one value for all, or one per engine). `store`:
        a store this process already serves, shared by several groups of distinct names
        (`dressage.weights.fleet`); its port is then the one the engines are sent, and its
        owner, not this sender, decides when it stops serving (this sender keeps no reference
        to it).

        Otherwise the sender serves the group's store itself, from `init_group` until the
        group is closed; rank 0 joins over a connection of its own, so that when the group
        cannot form, stopping the store ends the rendezvous of every rank still waiting in it:
        rank 0's (a thread nothing else can interrupt) and the engines' alike."""
        if not engines:
            raise ValueError("engines: a weight sender needs at least one engine")
        if backend not in BACKENDS:
            raise ValueError(f"backend: {backend!r} is not one of {list(BACKENDS)}")
        if bucket_bytes <= 0:
            raise ValueError(f"bucket_bytes: must be > 0, got {bucket_bytes}")
        self.engines = [EngineClient(e) if isinstance(e, str) else e for e in engines]
        self._owned = [isinstance(e, str) for e in engines]
        ranks = (
            [ranks_per_engine] * len(self.engines)
            if isinstance(ranks_per_engine, int)
            else list(ranks_per_engine)
        )
        if len(ranks) != len(self.engines) or any(r < 1 for r in ranks):
            raise ValueError(
                f"ranks_per_engine: need one value >= 1 per engine ({len(self.engines)}), "
                f"got {ranks_per_engine}"
            )
        self.rank_offsets = [1 + sum(ranks[:i]) for i in range(len(ranks))]
        self.world_size = 1 + sum(ranks)
        self.master_address = master_address
        self.master_port = master_port
        self.backend = backend
        self.group_name = group_name
        self.bucket_bytes = bucket_bytes
        self.timeout_s = timeout_s
        self.port: int | None = None
        """The port the group's store listens on (once formed)."""
        self._shared_port = None if store is None else store.port
        self._server: TCPStore | None = None
        """The store this sender serves (none with a shared one), while its group lives."""
        self._group: WeightUpdateGroup | None = None

    @property
    def ready(self) -> bool:
        return self._group is not None and not self._group.closed

    async def init_group(self) -> None:
        """Form the group: serve its store, have every engine join, join as rank 0."""
        if self.ready:
            return
        self._server = None  # an earlier group's store frees its port first
        if self._shared_port is None:
            self._server = open_store(
                self.master_address, self.master_port, self.world_size, True, self.timeout_s
            )
            port = self._server.port
        else:
            port = self._shared_port
        joins = [
            asyncio.ensure_future(
                engine.init_weights_update_group(
                    self.master_address,
                    port,
                    offset,
                    self.world_size,
                    group_name=self.group_name,
                    backend=self.backend,
                    timeout_s=self.timeout_s,
                )
            )
            for engine, offset in zip(self.engines, self.rank_offsets, strict=True)
        ]
        # Rank 0 joins over a connection of its own: its thread holds that, not the server.
        own = asyncio.ensure_future(
            in_daemon_thread(
                WeightUpdateGroup,
                master_address=self.master_address,
                master_port=port,
                rank=0,
                world_size=self.world_size,
                group_name=self.group_name,
                backend=self.backend,
                timeout_s=self.timeout_s,
                store=open_store(
                    self.master_address, port, self.world_size, False, self.timeout_s
                ),
            )
        )
        try:
            # The first failure ends the wait: an engine that refuses to join would otherwise
            # leave rank 0's rendezvous waiting for the whole timeout.
            await asyncio.wait([own, *joins], return_when=asyncio.FIRST_EXCEPTION)
            failures = [
                f"{engine.base_url}: {task.exception()}"
                for engine, task in zip(self.engines, joins, strict=True)
                if task.done() and task.exception() is not None
            ]
            if own.done() and own.exception() is not None:
                failures.insert(0, f"rank 0: {own.exception()}")
            if failures:
                raise WeightSyncError(
                    f"weight-update group {self.group_name!r} was not formed: "
                    + "; ".join(failures)
                )
        except BaseException:
            for task in joins:
                task.cancel()
            # A rendezvous cannot be interrupted, only failed by stopping its store: stopping
            # this sender's own ends rank 0's wait and the engines' at once (a shared store's
            # owner decides for its own). Should the group form first, it is closed.
            own.add_done_callback(_close_formed_group)
            self._server = None
            raise
        self._group = own.result()
        self.port = port

    async def send(
        self,
        named_tensors: Iterable[tuple[str, torch.Tensor]],
        version: str,
        *,
        flush_cache: bool = True,
        abort_all_requests: bool = False,
        flattened: bool | None = None,
    ) -> SendReport:
        """Broadcast every `(name, tensor)` (Hugging Face names, the serving dtype) to every
        engine in buckets, labelling the result `version` with the last bucket, inside a
        weight-update session where the release has them, then flush each engine's cache
        (`flush_cache`). `flattened`: one broadcast per bucket (None: when every engine's
        release takes it)."""
        if not self.ready:
            raise WeightSyncError("the weight-update group is not formed: call init_group first")
        assert self._group is not None
        if flattened is None:
            flattened = all(
                await asyncio.gather(*(e.supports_flattened_buckets() for e in self.engines))
            )
        start = time.perf_counter()
        count = total = sent = 0
        opened = await self.begin()
        try:
            for bucket, last in buckets(named_tensors, self.bucket_bytes, aligned=flattened):
                tensors = [staged(name, tensor, self.backend) for name, tensor in bucket]
                names = [name for name, _ in bucket]
                del bucket
                await self._send_bucket(
                    names,
                    tensors,
                    version if last else None,
                    abort_all_requests=abort_all_requests,
                    flattened=flattened,
                )
                count += 1
                sent += len(tensors)
                total += sum(t.numel() * t.element_size() for t in tensors)
                del tensors
        finally:
            await self.end(opened)
        if count == 0:
            raise WeightSyncError("named_tensors: nothing to send")
        if flush_cache:
            await asyncio.gather(*(e.flush_cache() for e in self.engines))
        return SendReport(count, sent, total, time.perf_counter() - start, flattened)

    async def begin(self) -> list[EngineClient]:
        """Open a weight-update session on every engine whose release has them; the engines
        that opened one. On a failure the sessions opened are closed again."""
        results = await asyncio.gather(
            *(e.begin_weight_update(timeout_s=self.timeout_s) for e in self.engines),
            return_exceptions=True,
        )
        opened = [e for e, r in zip(self.engines, results, strict=True) if r is True]
        failures = [
            f"{engine.base_url}: {result}"
            for engine, result in zip(self.engines, results, strict=True)
            if isinstance(result, BaseException)
        ]
        if failures:
            await self.end(opened)
            raise WeightSyncError(
                "opening the weight-update sessions failed: " + "; ".join(failures)
            )
        return opened

    async def end(self, opened: list[EngineClient]) -> None:
        """Close the weight-update sessions `begin` opened."""
        results = await asyncio.gather(
            *(e.end_weight_update(timeout_s=self.timeout_s) for e in opened),
            return_exceptions=True,
        )
        failures = [
            f"{engine.base_url}: {result}"
            for engine, result in zip(opened, results, strict=True)
            if isinstance(result, BaseException)
        ]
        if failures:
            raise WeightSyncError(
                "closing the weight-update sessions failed: " + "; ".join(failures)
            )

    async def _send_bucket(
        self,
        names: list[str],
        tensors: list[torch.Tensor],
        version: str | None,
        *,
        abort_all_requests: bool,
        flattened: bool,
    ) -> None:
        requests = self.request_bucket(
            names, tensors, version, abort_all_requests=abort_all_requests, flattened=flattened
        )
        payload = tensors
        if flattened:
            # Off the event loop, while the requests reach the engines and they set up the
            # receive: the copy into one buffer is the flattened path's own cost.
            try:
                payload = [await asyncio.to_thread(flat_bucket.flatten, tensors)]
            except Exception as exc:
                self.abandon(requests)
                raise WeightSyncError(
                    f"flattening a bucket ({names[0]} ...) failed: {exc} (the group is closed)"
                ) from exc
        await self.broadcast_bucket(names, payload, requests)

    def request_bucket(
        self,
        names: list[str],
        tensors: list[torch.Tensor],
        version: str | None,
        *,
        abort_all_requests: bool,
        flattened: bool,
    ) -> list[asyncio.Future[object]]:
        """Send each engine the bucket's `/update_weights_from_distributed` (outstanding until
        `broadcast_bucket` delivers the tensors); the requests, in engine order."""
        dtypes = [dtype_name(t.dtype) for t in tensors]
        shapes = [list(t.shape) for t in tensors]
        return [
            asyncio.ensure_future(
                engine.update_weights_from_distributed(
                    names,
                    dtypes,
                    shapes,
                    weight_version=version,
                    group_name=self.group_name,
                    flush_cache=False,
                    abort_all_requests=abort_all_requests,
                    flattened=flattened,
                    timeout_s=self.timeout_s,
                )
            )
            for engine in self.engines
        ]

    def abandon(self, requests: Sequence[asyncio.Future[object]]) -> None:
        """The engines wait for a broadcast that will not come: cancel `requests` and leave the
        group."""
        for request in requests:
            request.cancel()
        if self._group is not None:
            self._group.close()

    async def broadcast_bucket(
        self,
        names: list[str],
        payload: list[torch.Tensor],
        requests: Sequence[asyncio.Future[object]],
    ) -> None:
        """Broadcast `payload` (the bucket's tensors, or its one flattened buffer) while the
        engines' `requests` wait for it; `WeightSyncError` naming each engine that failed."""
        assert self._group is not None
        broadcast = in_daemon_thread(self._group.broadcast, payload)
        results = await asyncio.gather(broadcast, *requests, return_exceptions=True)
        failures = [
            f"{engine.base_url}: {result}"
            for engine, result in zip(self.engines, results[1:], strict=True)
            if isinstance(result, BaseException)
        ]
        if isinstance(results[0], BaseException):
            self._group.close()
            failures.insert(0, f"broadcast: {results[0]} (the group is closed)")
        if failures:
            raise WeightSyncError(
                f"a bucket of {len(names)} tensors ({names[0]} ...) was not loaded: "
                + "; ".join(failures)
            )

    async def destroy_group(self) -> None:
        """Have every engine leave the group (where its release can), then leave it."""
        if self._group is None:
            return
        errors = await asyncio.gather(
            *(e.destroy_weights_update_group(self.group_name) for e in self.engines),
            return_exceptions=True,
        )
        self._group.close()
        self._group = None
        self._server = None
        unexpected = [
            f"{engine.base_url}: {err}"
            for engine, err in zip(self.engines, errors, strict=True)
            if isinstance(err, BaseException) and not isinstance(err, EngineError)
        ]
        if unexpected:
            raise WeightSyncError("leaving the group failed: " + "; ".join(unexpected))

    def close_group(self) -> None:
        """Leave the group on this side only (the engines are not asked)."""
        if self._group is not None:
            self._group.close()
            self._group = None
        self._server = None

    async def aclose(self) -> None:
        if self._group is not None:
            self._group.close()
            self._group = None
        self._server = None
        await asyncio.gather(
            *(e.aclose() for e, owned in zip(self.engines, self._owned, strict=True) if owned)
        )
