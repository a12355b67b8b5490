"""The flattened-bucket layout of a distributed weight update (`load_format: flattened_bucket`).

A bucket of tensors travels as one uint8 tensor: tensor `i`'s bytes (`tensor.flatten().view(
torch.uint8)`) follow tensor `i-1`'s with no padding, in the order of the request's `names`.
This is SGLang's `FlattenedTensorBucket` (0.5.23 `srt/weight_sync/tensor_bucket.py`): the
receiver allocates `FlattenedTensorBucket.empty(names, dtypes, shapes)`, whose offsets are the
running sum of `numel * itemsize`, refuses an offset that is not a multiple of the tensor's
itemsize ("Unaligned received tensor ..."), receives one broadcast into it and views each slice
as its dtype and shape. The sender (`dressage.weights.broadcast`) packs the same way and
starts a new bucket rather than place a tensor at an unaligned offset; the embedded engine
receives the same way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


def nbytes(dtype: torch.dtype, shape: Sequence[int]) -> int:
    return math.prod(shape) * dtype.itemsize


def layout(
    names: Sequence[str], dtypes: Sequence[torch.dtype], shapes: Sequence[Sequence[int]]
) -> list[tuple[int, int]]:
    """Each tensor's byte range `[start, end)` in the flat buffer; ValueError naming the first
    tensor whose offset is not aligned to its dtype (as the receiver refuses it)."""
    ranges = []
    offset = 0
    for name, dtype, shape in zip(names, dtypes, shapes, strict=True):
        if any(d < 0 for d in shape):
            raise ValueError(f"Negative dimension in received tensor {name}: {list(shape)}")
        if offset % dtype.itemsize:
            raise ValueError(
                f"Unaligned received tensor {name}: byte offset {offset}, dtype {dtype}"
            )
        size = nbytes(dtype, shape)
        ranges.append((offset, offset + size))
        offset += size
    if not ranges:
        raise ValueError("Cannot create empty tensor bucket")
    return ranges


def aligned(offset: int, dtype: torch.dtype) -> bool:
    """Whether a tensor of `dtype` may start at byte `offset` of a flat bucket."""
    return offset % dtype.itemsize == 0


def flatten(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """The bucket's flat uint8 buffer (each tensor's bytes in order, no padding)."""
    offset = 0
    for tensor in tensors:
        if not aligned(offset, tensor.dtype):
            raise ValueError(f"a {tensor.dtype} tensor cannot start at byte offset {offset}")
        offset += tensor.numel() * tensor.element_size()
    return torch.cat([t.detach().contiguous().reshape(-1).view(torch.uint8) for t in tensors])


def unflatten(
    buffer: torch.Tensor,
    dtypes: Sequence[torch.dtype],
    shapes: Sequence[Sequence[int]],
    ranges: Sequence[tuple[int, int]],
) -> list[torch.Tensor]:
    """Views of `buffer` as the bucket's tensors (no copy)."""
    return [
        buffer[start:end].view(dtype).reshape(list(shape))
        for dtype, shape, (start, end) in zip(dtypes, shapes, ranges, strict=True)
    ]
