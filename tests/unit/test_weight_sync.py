"""Bucketing of the trainer's weight broadcast: bounded bytes, lazy consumption, order kept."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from dressage.orchestrator.weight_sync import DistributedWeightSender, buckets


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
