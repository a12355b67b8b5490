"""The flattened-bucket layout: tensors back to back as bytes, read back exactly, an offset a
dtype cannot be read from refused (as SGLang's `FlattenedTensorBucket.empty` refuses it)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from dressage.engine import flat_bucket
from dressage.weights.broadcast import buckets

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@given(
    st.lists(
        st.tuples(st.sampled_from(DTYPES), st.lists(st.integers(1, 5), min_size=1, max_size=3)),
        min_size=1,
        max_size=6,
    )
)
def test_what_is_flattened_in_aligned_buckets_comes_back_bit_for_bit(
    specs: list[tuple[torch.dtype, list[int]]],
) -> None:
    named = [(f"t{i}", torch.randn(shape).to(dtype)) for i, (dtype, shape) in enumerate(specs)]
    for bucket, _ in buckets(named, 64, aligned=True):
        names = [n for n, _ in bucket]
        tensors = [t for _, t in bucket]
        dtypes = [t.dtype for t in tensors]
        shapes = [list(t.shape) for t in tensors]
        flat = flat_bucket.flatten(tensors)
        ranges = flat_bucket.layout(names, dtypes, shapes)
        assert flat.dtype == torch.uint8
        assert flat.numel() == ranges[-1][1]
        back = flat_bucket.unflatten(flat, dtypes, shapes, ranges)
        for sent, received in zip(tensors, back, strict=True):
            assert received.dtype == sent.dtype
            assert torch.equal(received.view(torch.uint8), sent.view(torch.uint8))


def test_an_unaligned_offset_is_refused_naming_the_tensor() -> None:
    with pytest.raises(ValueError, match=r"Unaligned received tensor wide: byte offset 2"):
        flat_bucket.layout(["half", "wide"], [torch.float16, torch.float32], [[1], [1]])
    with pytest.raises(ValueError, match="cannot start at byte offset 2"):
        flat_bucket.flatten([torch.zeros(1, dtype=torch.float16), torch.zeros(1)])


def test_aligned_bucketing_starts_a_new_bucket_rather_than_misalign() -> None:
    named = [("half", torch.zeros(1, dtype=torch.float16)), ("wide", torch.zeros(1))]
    assert [[n for n, _ in b] for b, _ in buckets(named, 1 << 20, aligned=True)] == [
        ["half"],
        ["wide"],
    ]
    assert [[n for n, _ in b] for b, _ in buckets(named, 1 << 20)] == [["half", "wide"]]
