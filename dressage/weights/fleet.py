"""Distributed weight sync to an engine fleet that changes while the trainer runs: one small
weight-update group per engine, formed when the engine joins, closed when it leaves.

Trainer rank 0 and each engine form a group of their own (1 + the engine's tensor-parallel
ranks; a `DistributedWeightSender` with one engine), all on one rendezvous store that rank 0
serves on its weight-sync port, each under a name of its own (`weight_membership.GroupNames`).
Before each publish `update_members` compares the members with the engine set: new engines
join (their groups form while generation goes on elsewhere), engines that left or stopped
answering lose their groups. An engine that joins serves its start-up weights under another
version label, so the proxy holds it out until the next publish has sent it the current
weights.

A publish walks the trainer's weights once, bucket by bucket: each bucket goes to every member
concurrently (a request per engine, a broadcast per group), flattened (one uint8 broadcast) for
the engines whose release takes it (0.5.23) and per tensor for the others, each inside a
weight-update session where its release has one. A member that fails (refuses a bucket, dies,
cannot open a session) gets no further buckets, keeps its old version label, and leaves: its
group is closed, so the next publish forms a fresh one with it if it is still in the engine set.
The others are unaffected, as with `disk`.

Why one group per engine rather than one group for all: a single group cannot grow or shrink,
so every change would re-form it on every engine, stalling all of them in a rendezvous; on
SGLang 0.5.2, which has no `/destroy_weights_update_group` and refuses a group name it holds,
each re-formation would also leave every surviving engine holding a dead group. A member that
dies mid-broadcast would stall the whole single group until its timeout. The price is that rank
0 sends each bucket once per engine instead of once (`benchmarks/weight_sync.py` measures it).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterable, Sequence

import torch
from torch._C._distributed_c10d import TCPStore

from dressage.engine import flat_bucket
from dressage.engine.client import EngineClient
from dressage.engine.weight_group import (
    BACKENDS,
    DEFAULT_GROUP_NAME,
    DEFAULT_TIMEOUT_S,
    open_store,
)
from dressage.weights import membership as weight_membership
from dressage.weights.broadcast import (
    DEFAULT_BUCKET_BYTES,
    DistributedWeightSender,
    SendReport,
    WeightSyncError,
    buckets,
    staged,
)

log = logging.getLogger("dressage.publish")


@dataclasses.dataclass(frozen=True)
class MembershipChange:
    """What `update_members` did."""

    joined: tuple[str, ...]
    left: tuple[str, ...]
    failed: dict[str, str]
    """Engines that could not join (URL -> why); they are tried again next time."""


@dataclasses.dataclass(frozen=True)
class FleetSendReport:
    """What one `FleetWeightSender.send` moved, and to whom."""

    report: SendReport
    """Buckets, tensors and bytes walked once (each went to every member that took it)."""
    loaded: tuple[str, ...]
    """The members that loaded every bucket and serve the new version."""
    failed: dict[str, str]
    """Members that did not (URL -> why); they have left."""


@dataclasses.dataclass
class _Member:
    sender: DistributedWeightSender
    flattened: bool
    error: str | None = None


class FleetWeightSender:
    """Trainer rank 0's side of the per-engine weight-update groups."""

    def __init__(
        self,
        *,
        master_address: str,
        master_port: int = 0,
        backend: str = "nccl",
        group_name: str = DEFAULT_GROUP_NAME,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        ranks_per_engine: int = 1,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        name_token: str | None = None,
    ) -> None:
        """`master_address:master_port`: where the engines reach this process (0: a free port,
        for engines on this host). `group_name` is the base of every group's name;
        `name_token` makes the names unique to this process (random by default)."""
        if backend not in BACKENDS:
            raise ValueError(f"backend: {backend!r} is not one of {list(BACKENDS)}")
        if bucket_bytes <= 0:
            raise ValueError(f"bucket_bytes: must be > 0, got {bucket_bytes}")
        self.world_size = weight_membership.group_world_size(ranks_per_engine)
        self.master_address = master_address
        self.master_port = master_port
        self.backend = backend
        self.bucket_bytes = bucket_bytes
        self.ranks_per_engine = ranks_per_engine
        self.timeout_s = timeout_s
        self.names = weight_membership.GroupNames(group_name, name_token)
        self._store: TCPStore | None = None
        self._members: dict[str, _Member] = {}

    @property
    def members(self) -> list[str]:
        """The URLs of the engines with a formed group, in the order they joined."""
        return list(self._members)

    @property
    def port(self) -> int | None:
        """The port the shared store listens on (once the first group is formed)."""
        return None if self._store is None else self._store.port

    def group_of(self, url: str) -> str | None:
        """The group name a member holds."""
        member = self._members.get(weight_membership.normalise(url))
        return None if member is None else member.sender.group_name

    async def update_members(self, engines: Sequence[EngineClient]) -> MembershipChange:
        """Make the members `engines`: form a group with each one that has none (all at once),
        close the groups of the members not among them. An engine that cannot join is left
        out (and offered a new group next time); nothing is raised for it."""
        by_url = {weight_membership.normalise(e.base_url): e for e in engines}
        plan = weight_membership.plan(self._members, list(by_url))
        for url in plan.leave:
            await self._leave(url, "left the engine set")
        results = await asyncio.gather(
            *(self._join(by_url[url]) for url in plan.join), return_exceptions=True
        )
        failed: dict[str, str] = {}
        for url, result in zip(plan.join, results, strict=True):
            if isinstance(result, asyncio.CancelledError):
                raise result
            if isinstance(result, BaseException):
                failed[url] = str(result)
        joined = tuple(url for url in plan.join if url not in failed)
        return MembershipChange(joined, plan.leave, failed)

    async def _join(self, engine: EngineClient) -> None:
        # A join that fails leaves rank 0's rendezvous of that group waiting in the shared
        # store until `timeout_s`: the store cannot stop for it, since the groups formed beside
        # it still read it (NCCL exchanges its communicator's id there at the first broadcast).
        if self._store is None:
            self._store = open_store(
                self.master_address, self.master_port, self.world_size, True, self.timeout_s
            )
        sender = DistributedWeightSender(
            [engine],
            master_address=self.master_address,
            backend=self.backend,
            group_name=self.names.next(),
            bucket_bytes=self.bucket_bytes,
            ranks_per_engine=self.ranks_per_engine,
            timeout_s=self.timeout_s,
            store=self._store,
        )
        await sender.init_group()
        flattened = await engine.supports_flattened_buckets()
        self._members[weight_membership.normalise(engine.base_url)] = _Member(sender, flattened)

    async def _leave(self, url: str, why: str) -> None:
        """Close `url`'s group; where the engine still answers and its release can, it leaves
        too (0.5.3+), else it keeps a dead group under a name never offered again."""
        member = self._members.pop(url)
        log.info("engine %s leaves weight-update group %s: %s", url, member.sender.group_name, why)
        with contextlib.suppress(Exception):
            # A gone engine, or one of a release without the route: its group stays behind.
            await asyncio.wait_for(member.sender.destroy_group(), timeout=10.0)
        member.sender.close_group()

    async def send(
        self,
        named_tensors: Iterable[tuple[str, torch.Tensor]],
        version: str,
        *,
        flush_cache: bool = True,
        abort_all_requests: bool = False,
    ) -> FleetSendReport:
        """Broadcast every `(name, tensor)` to every member, `version` on the last bucket, then
        flush each cache (`flush_cache`). Members that fail are reported and leave; raises only
        for what fails all of them (nothing to send, a tensor that cannot be sent)."""
        for url, member in list(self._members.items()):
            if not member.sender.ready:  # a broadcast of an earlier send failed and closed it
                await self._leave(url, "its group was closed by a failed broadcast")
            member.error = None
        live = dict(self._members)
        start = time.perf_counter()
        opened: dict[str, list[EngineClient]] = {}
        begun = await asyncio.gather(
            *(m.sender.begin() for m in live.values()), return_exceptions=True
        )
        for (url, member), began in zip(list(live.items()), begun, strict=True):
            if isinstance(began, BaseException):
                member.error = f"opening the weight-update session failed: {began}"
                del live[url]
            else:
                opened[url] = began
        count = sent = total = 0
        try:
            aligned = any(m.flattened for m in live.values())
            for bucket, last in buckets(named_tensors, self.bucket_bytes, aligned=aligned):
                names = [name for name, _ in bucket]
                tensors = [staged(name, tensor, self.backend) for name, tensor in bucket]
                del bucket
                await self._send_bucket(
                    live, names, tensors, version if last else None, abort_all_requests
                )
                count += 1
                sent += len(tensors)
                total += sum(t.numel() * t.element_size() for t in tensors)
                del tensors
        finally:
            ends = await asyncio.gather(
                *(self._members[url].sender.end(o) for url, o in opened.items()),
                return_exceptions=True,
            )
            for url, ended in zip(list(opened), ends, strict=True):
                if isinstance(ended, BaseException) and url in live:
                    live.pop(url).error = f"closing the weight-update session failed: {ended}"
        if count == 0:
            raise WeightSyncError("named_tensors: nothing to send")
        if flush_cache:
            flushes = await asyncio.gather(
                *(m.sender.engines[0].flush_cache() for m in live.values()),
                return_exceptions=True,
            )
            for url, flushed in zip(list(live), flushes, strict=True):
                if isinstance(flushed, BaseException):
                    # The weights and label are new; only the cache is not emptied.
                    log.warning(
                        "engine %s: the cache flush after the update failed: %s", url, flushed
                    )
        failed: dict[str, str] = {}
        for url, member in self._members.items():
            if member.error is not None:
                failed[url] = member.error
        for url in failed:
            await self._leave(url, failed[url])
        report = SendReport(count, sent, total, time.perf_counter() - start, aligned)
        return FleetSendReport(report, tuple(live), failed)

    async def _send_bucket(
        self,
        live: dict[str, _Member],
        names: list[str],
        tensors: list[torch.Tensor],
        version: str | None,
        abort_all_requests: bool,
    ) -> None:
        """One bucket to every live member; a member that fails is taken out of `live`."""
        requests = {
            url: m.sender.request_bucket(
                names,
                tensors,
                version,
                abort_all_requests=abort_all_requests,
                flattened=m.flattened,
            )
            for url, m in live.items()
        }
        flat: list[torch.Tensor] | None = None
        if any(m.flattened for m in live.values()):
            try:
                flat = [await asyncio.to_thread(flat_bucket.flatten, tensors)]
            except Exception as exc:
                for url, m in live.items():
                    m.sender.abandon(requests[url])
                raise WeightSyncError(
                    f"flattening a bucket ({names[0]} ...) failed: {exc} (the groups are closed)"
                ) from exc
        members = list(live.items())
        results = await asyncio.gather(
            *(
                m.sender.broadcast_bucket(
                    names, flat if m.flattened and flat is not None else tensors, requests[url]
                )
                for url, m in members
            ),
            return_exceptions=True,
        )
        for (url, member), result in zip(members, results, strict=True):
            if isinstance(result, asyncio.CancelledError):
                raise result
            if isinstance(result, BaseException):
                member.error = str(result)
                del live[url]

    async def aclose(self) -> None:
        """Close every group (the engines are not asked to leave) and the store."""
        for member in self._members.values():
            member.sender.close_group()
        self._members.clear()
        self._store = None
