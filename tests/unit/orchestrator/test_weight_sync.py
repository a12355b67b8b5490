"""Bucketing of the trainer's weight broadcast: bounded bytes, lazy consumption, order kept."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import ClassVar

import pytest
import torch

from dressage.weights.broadcast import DistributedWeightSender, WeightSyncError, buckets
from dressage.weights.engines import EngineSource
from dressage.weights.fleet import MembershipChange


class _Engines(EngineSource):
    """An engine set that records pauses and continues (`routed`: a proxy routes around an
    engine on another version)."""

    def __init__(self, urls: list[str], *, routed: bool = False) -> None:
        super().__init__()
        self.urls = urls
        self._routed = routed
        self.calls: list[str] = []
        self.resumed: list[str | None] = []

    @property
    def routed(self) -> bool:
        return self._routed

    async def targets(self) -> list[str]:
        return list(self.urls)

    async def pause(self, mode: str) -> None:
        self.calls.append("pause")

    async def resume(self, version: str | None, serving: Sequence[str] = ()) -> None:
        self.calls.append("continue")
        self.resumed.append(version)

    async def lagging(self, version: str) -> list[str]:
        return []

    async def versions(self) -> list[str | None]:
        return [None for _ in self.urls]


def test_buckets_hold_at_most_bucket_bytes_and_pull_one_tensor_ahead() -> None:
    pulled: list[str] = []

    def tensors() -> Iterator[tuple[str, torch.Tensor]]:
        for i, n in enumerate([10, 10, 10, 30, 5, 5]):  # float32: 4 bytes per element
            pulled.append(f"t{i}")
            yield f"t{i}", torch.zeros(n)

    seen = []
    for bucket, last in buckets(tensors(), bucket_bytes=80):
        names = [name for name, _ in bucket]
        seen.append((names, last))
        # Nothing beyond this bucket and the tensor that did not fit was pulled.
        assert len(pulled) <= sum(len(b) for b, _ in seen) + 1
        assert sum(t.numel() * 4 for _, t in bucket) <= 80 or len(bucket) == 1
    assert seen == [(["t0", "t1"], False), (["t2"], False), (["t3"], False), (["t4", "t5"], True)]


def test_a_tensor_larger_than_a_bucket_goes_alone() -> None:
    out = list(buckets([("big", torch.zeros(100)), ("small", torch.zeros(1))], bucket_bytes=16))
    assert [[name for name, _ in b] for b, _ in out] == [["big"], ["small"]]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"bucket_bytes": 0}, "bucket_bytes"),
        ({"backend": "mpi"}, "backend"),
        ({"ranks_per_engine": [1, 2]}, "ranks_per_engine"),
    ],
)
def test_bad_sender_settings_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        DistributedWeightSender(["http://e:1"], master_address="h", **kwargs)  # type: ignore[arg-type]


def test_rank_offsets_follow_each_engines_tensor_parallel_size() -> None:
    sender = DistributedWeightSender(
        ["http://a:1", "http://b:1", "http://c:1"], master_address="h", ranks_per_engine=[2, 1, 4]
    )
    assert sender.rank_offsets == [1, 3, 4]
    assert sender.world_size == 8


class _FailingSender:
    """A fleet of one member that takes the first tensor of a publish, then fails as a refused
    bucket would."""

    members: ClassVar[list[str]] = ["http://127.0.0.1:9"]

    async def update_members(self, engines: list[object]) -> MembershipChange:
        return MembershipChange((), (), {})

    async def send(self, named: Iterator[tuple[str, torch.Tensor]], version: str) -> None:
        next(iter(named))
        raise WeightSyncError("a bucket was not loaded")

    async def aclose(self) -> None:
        pass


async def test_a_failed_publish_still_takes_part_in_every_gather_and_continues_generation() -> None:
    """Each tensor is a collective over the trainer gang: rank 0 must consume all of them
    even when a bucket fails, or the other ranks would wait in a gather forever."""
    from dressage.weights.collective import CollectiveFollower, CollectivePublisher

    handed: list[str] = []

    def weights() -> Iterator[tuple[str, torch.Tensor]]:
        for name in ("a", "b", "c"):
            handed.append(name)
            yield name, torch.zeros(2)

    engines = _Engines(["http://127.0.0.1:9"])
    publisher = CollectivePublisher(
        engines,
        weights=weights,
        master_address="127.0.0.1",
        master_port=0,
        backend="gloo",
    )
    publisher.sender = _FailingSender()  # type: ignore[assignment]
    with pytest.raises(WeightSyncError, match="not loaded"):
        await publisher.publish(Path(), "v1")
    assert handed == ["a", "b", "c"]
    assert engines.calls == ["pause", "continue"]
    assert engines.resumed == [None]  # the engines keep their old label
    await publisher.aclose()

    handed.clear()
    await CollectiveFollower(weights).publish(Path(), "v1")
    assert handed == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("inference", "field"),
    [
        ({"weightSync": "nfs"}, "spec.inference.weightSync"),
        ({"weightSyncPort": 0}, "spec.inference.weightSyncPort"),
        ({"weightSyncBucketMegabytes": 0}, "spec.inference.weightSyncBucketMegabytes"),
    ],
)
def test_bad_weight_sync_settings_name_the_field(inference: dict[str, object], field: str) -> None:
    from dressage.api.loader import JobValidationError, validate_job

    body = {"metadata": {"name": "j"}, "spec": {"model": {"source": "m"}, "inference": inference}}
    with pytest.raises(JobValidationError) as info:
        validate_job(body)
    assert [f for f, _ in info.value.errors] == [field]


def test_the_trainer_wiring_of_the_weight_update_group() -> None:
    from dressage.api.job import AsyncRLJobSpec
    from dressage.orchestrator.pipeline import weight_sync_wiring

    disk = AsyncRLJobSpec.model_validate({"model": {"source": "m"}})
    assert weight_sync_wiring(disk, "trainer-0", None, torch.device("cpu")) is None
    spec = AsyncRLJobSpec.model_validate(
        {
            "model": {"source": "m"},
            "inference": {"weightSync": "distributed", "tensorParallelSize": 4},
        }
    )
    wiring = weight_sync_wiring(spec, "trainer-0", None, torch.device("cpu"))
    assert wiring is not None
    assert (wiring.master_address, wiring.master_port) == ("trainer-0", 29600)
    assert (wiring.backend, wiring.ranks_per_engine) == ("gloo", 4)
    with pytest.raises(ValueError, match="DRESSAGE_WEIGHT_SYNC_ADDRESS"):
        weight_sync_wiring(spec, None, None, torch.device("cpu"))


class _HalfFailingSender:
    """A fleet of two members of which one fails the publish."""

    members: ClassVar[list[str]] = ["http://a:1", "http://b:1"]

    async def send(self, named: Iterator[tuple[str, torch.Tensor]], version: str) -> object:
        from dressage.weights.broadcast import SendReport
        from dressage.weights.fleet import FleetSendReport

        for _ in named:
            pass
        return FleetSendReport(
            SendReport(1, 3, 24, 0.1), ("http://a:1",), {"http://b:1": "connection reset"}
        )

    async def aclose(self) -> None:
        pass


@pytest.mark.parametrize("with_proxy", [True, False])
async def test_an_engine_that_fails_a_publish_fails_it_only_without_a_proxy(
    with_proxy: bool,
) -> None:
    """With a proxy the engines that took the version serve it and the one that did not is
    held out (the publish succeeds, as with disk); without one every engine must take it."""
    from dressage.weights.collective import CollectivePublisher

    def weights() -> Iterator[tuple[str, torch.Tensor]]:
        yield from (("a", torch.zeros(2)), ("b", torch.zeros(2)), ("c", torch.zeros(2)))

    engines = _Engines(["http://a:1", "http://b:1"], routed=with_proxy)
    publisher = CollectivePublisher(
        engines,
        weights=weights,
        master_address="127.0.0.1",
        master_port=0,
        backend="gloo",
    )

    async def nothing(*args: object) -> None:
        return None

    publisher.sender = _HalfFailingSender()  # type: ignore[assignment]
    publisher.start = nothing  # type: ignore[assignment,method-assign]
    publisher.catch_up_interval_s = None
    if with_proxy:
        await publisher.publish(Path("/nonexistent"), "v1")
    else:
        with pytest.raises(WeightSyncError, match=r"http://b:1: connection reset"):
            await publisher.publish(Path("/nonexistent"), "v1")
    assert engines.resumed == ["v1"]  # the engine that took it serves it either way
    await publisher.aclose()
