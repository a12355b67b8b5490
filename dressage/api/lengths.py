"""The response-length buckets the length figures count by (`dressage.api.figures`:
`generated_samples_by_length`, `dropped_samples_by_length`): fixed token bounds, so a bucket
means the same in every job and step, whatever the task's length distribution."""

from __future__ import annotations

LENGTH_BUCKETS = ("le16", "le64", "le256", "gt256")
"""At most 16, 64, 256 tokens, and more."""
_BOUNDS = (16, 64, 256)


def length_bucket(tokens: int) -> str:
    """The bucket (`LENGTH_BUCKETS`) of a response of `tokens` tokens."""
    for bound, name in zip(_BOUNDS, LENGTH_BUCKETS, strict=False):
        if tokens <= bound:
            return name
    return LENGTH_BUCKETS[-1]
