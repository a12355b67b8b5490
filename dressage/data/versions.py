"""Weight-version labels: which ones are real, the initial label, spans in observation order.

A weight version is an opaque label issued by the trainer each time it publishes weights
(`version_label(i)`: `v0` for the initial weights, then `v1`, `v2`, ...). Labels are compared
as strings (`3` and `"3"` are the same version) and ordered by when they are first observed,
never by sorting labels (the staleness tracker places a late-observed label of the trainer's own
form at its issue index: `issued_index`). A version is *real* unless it is missing, empty,
`unknown` or `-1`; non-real versions carry no information and are ignored by every count here.

Labels are normalised where they enter the data model (`Sample` construction, the staleness
tracker's `observe`); code holding a `Sample` can trust its versions are canonical.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

Version = str | int | None
"""A version label as it arrives from engines, samples or manifests."""

NON_REAL_LABELS = frozenset({"", "unknown", "-1", "none", "null"})

VERSION_PREFIX: Final = "v"


def version_label(index: int) -> str:
    """The label of the `index`-th published weight version (`v0`: the initial weights)."""
    if index < 0:
        raise ValueError(f"a weight version index must be >= 0, got {index}")
    return f"{VERSION_PREFIX}{index}"


def issued_index(label: str) -> int | None:
    """The index of a label `version_label` issued (`v12` -> 12); None for any other label.

    Only the exact form `version_label` writes counts (`v012`, `v-1` or `12` do not), so a label
    from another source is never mistaken for one of the trainer's."""
    digits = label[len(VERSION_PREFIX) :]
    if not label.startswith(VERSION_PREFIX) or not digits.isdigit() or not digits.isascii():
        return None
    index = int(digits)
    return index if version_label(index) == label else None


INITIAL_VERSION: Final = version_label(0)
"""The label engines serve before the trainer publishes anything. The trainer's version counter
starts here, so every component that labels the initial weights agrees with it."""


def normalize_version(version: object) -> str | None:
    """The canonical label of `version`, or None when it is not a real version."""
    if version is None or isinstance(version, bool):
        return None
    label = str(version).strip()
    if label.lower() in NON_REAL_LABELS:
        return None
    return label


def is_real_version(version: object) -> bool:
    """Whether `version` identifies a weight version (not missing, empty, unknown or -1)."""
    return normalize_version(version) is not None


def normalized_versions(versions: Sequence[object]) -> list[str | None]:
    """`normalize_version` of each per-token version (one entry per token)."""
    distinct = _distinct_exactly(versions)
    if distinct is None:
        return [normalize_version(v) for v in versions]
    labels = {v: normalize_version(v) for v in distinct}
    return list(map(labels.__getitem__, versions))


def distinct_real_versions(versions: Iterable[object]) -> list[str]:
    """Real versions in order of first appearance, each once."""
    values = versions if isinstance(versions, list | tuple) else list(versions)
    distinct = _distinct_exactly(values)
    seen: dict[str, None] = {}
    for version in values if distinct is None else distinct:
        label = normalize_version(version)
        if label is not None:
            seen.setdefault(label, None)
    return list(seen)


def _distinct_exactly(values: Sequence[object]) -> dict[object, None] | None:
    """The distinct entries of `values` (first occurrences, in order), or None where
    deduplicating would not be exact.

    Per-token version lists repeat one or a few labels once per token; dropping repeats in C
    (`dict.fromkeys`) spares `normalize_version` a call per token. That is exact when every
    label is a string or None, which equal only themselves; anything else (`1` and `True` are
    equal dict keys) or an unhashable label gives None, and the caller goes entry by entry.
    """
    try:
        distinct = dict.fromkeys(values)
    except TypeError:
        return None
    if all(value is None or type(value) is str for value in distinct):
        return distinct
    return None


def version_span(versions: Iterable[object]) -> int:
    """How many distinct real versions `versions` covers (0 when none is real)."""
    return len(distinct_real_versions(versions))


def version_switches(versions: Iterable[object]) -> int:
    """Version switches implied by a span: `max(0, version_span - 1)`."""
    return max(0, version_span(versions) - 1)
