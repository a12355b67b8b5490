"""Runs of weight versions: `VersionSpan`, the one type for "n consecutive tokens of version v".

Three wire shapes meet here, each converted in one place:

- per-token lists (`full_versions`, one label per token): `compress_versions` and
  `expand_version_spans`;
- segment records' `version_spans`: `[[version, length], ...]` (`VersionSpan.to_list`,
  `spans_from_lists`);
- SGLang's `meta_info.weight_versions`: `[{"version", "start", "end"}, ...]` over output
  tokens, contiguous from 0 (`spans_from_sglang`, `spans_to_sglang`). The embedded engine
  sends the same shape.

Labels are kept as given (`str` or None); normalisation happens when a `Sample` is built.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class VersionSpan:
    """A run of `length` consecutive tokens produced under one version (None: no version)."""

    version: str | None
    length: int

    def to_list(self) -> list[Any]:
        """The record encoding `[version, length]`."""
        return [self.version, self.length]


def compress_versions(versions: Iterable[str | None]) -> list[VersionSpan]:
    """Run-length encode per-token versions (labels compared as given)."""
    spans: list[VersionSpan] = []
    current: str | None = None
    length = 0
    for version in versions:
        if length and version == current:
            length += 1
            continue
        if length:
            spans.append(VersionSpan(current, length))
        current, length = version, 1
    if length:
        spans.append(VersionSpan(current, length))
    return spans


def expand_version_spans(spans: Iterable[VersionSpan]) -> list[str | None]:
    """Inverse of `compress_versions`."""
    out: list[str | None] = []
    for span in spans:
        if span.length < 0:
            raise ValueError(f"version span length must be >= 0, got {span.length}")
        out.extend([span.version] * span.length)
    return out


def extend_spans(spans: list[VersionSpan], more: Iterable[VersionSpan]) -> None:
    """Append `more` to `spans` in place, merging a run that continues the last one."""
    for span in more:
        if span.length == 0:
            continue
        if spans and spans[-1].version == span.version:
            spans[-1] = VersionSpan(span.version, spans[-1].length + span.length)
        else:
            spans.append(span)


def spans_from_lists(raw: object) -> list[VersionSpan]:
    """Decode a record's `version_spans` (`[[version, length], ...]`); ValueError if malformed."""
    if not isinstance(raw, list):
        raise ValueError("version_spans must be a list of [version, length] pairs")
    spans: list[VersionSpan] = []
    for entry in raw:
        if not isinstance(entry, list | tuple) or len(entry) != 2:
            raise ValueError(f"version_spans entry {entry!r} is not a [version, length] pair")
        version, length = entry
        if isinstance(length, bool) or not isinstance(length, int) or length < 0:
            raise ValueError(f"version_spans entry {entry!r}: length must be an integer >= 0")
        spans.append(VersionSpan(None if version is None else str(version), length))
    return spans


def spans_from_sglang(raw: object, n_tokens: int) -> list[VersionSpan]:
    """Parse SGLang's `meta_info.weight_versions` for a response of `n_tokens` output tokens.

    The spans must be contiguous from token 0 and cover the output exactly; a ValueError names
    the first span that does not. Empty runs are dropped.
    """
    if not isinstance(raw, list):
        raise ValueError(f"weight_versions must be a list of spans, got {type(raw).__name__}")
    spans: list[VersionSpan] = []
    covered = 0
    for span in raw:
        try:
            start, end, version = int(span["start"]), int(span["end"]), span["version"]
        except (KeyError, TypeError, ValueError):
            raise ValueError(
                f"weight_versions span {span!r} is not {{version, start, end}}"
            ) from None
        if start != covered or end < start:
            raise ValueError(f"weight_versions span {span!r} does not continue at token {covered}")
        if end > start:
            label = None if version is None else str(version)
            extend_spans(spans, (VersionSpan(label, end - start),))
        covered = end
    if covered != n_tokens:
        raise ValueError(f"weight_versions cover {covered} tokens, output has {n_tokens}")
    return spans


def spans_to_sglang(spans: Sequence[VersionSpan]) -> list[dict[str, Any]]:
    """SGLang's `weight_versions` shape of `spans`: `{"version", "start", "end"}` per run."""
    out: list[dict[str, Any]] = []
    start = 0
    for span in spans:
        out.append({"version": span.version, "start": start, "end": start + span.length})
        start += span.length
    return out
