"""The engine set a proxy reports (`GET /dressage/engines`), and the one of several replicas.

Each replica follows the same engine list but judges the engines' health and reads their
versions on its own; `merge_engine_sets` is how the publisher and `dressage eval` see them as
one set."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class EngineView:
    """One engine as the proxy sees it (`GET /dressage/engines`)."""

    url: str
    healthy: bool
    routable: bool
    weight_version: str | None
    last_error: str | None = None
    """Why the proxy last found it down (None while it passes, or from a proxy that does not
    say)."""


@dataclass(frozen=True)
class EngineSet:
    """The proxy's engines and the weight version it routes to (None: not told one yet)."""

    weight_version: str | None
    engines: tuple[EngineView, ...]

    @classmethod
    def from_json(cls, data: Any) -> EngineSet:
        try:
            engines = tuple(
                EngineView(
                    url=str(e["url"]),
                    healthy=bool(e["healthy"]),
                    routable=bool(e["routable"]),
                    weight_version=_label(e["weight_version"]),
                    last_error=_label(e.get("last_error")),
                )
                for e in data["engines"]
            )
            version = data["weight_version"]
        except (KeyError, TypeError) as exc:
            raise ValueError(f"the proxy's engine set is malformed: {exc!r}") from None
        return cls(_label(version), engines)


def merge_engine_sets(views: Sequence[EngineSet]) -> EngineSet:
    """The engine set of several proxy replicas, which follow one engine list but each judge
    the engines' health and read their versions on their own: every engine any replica lists
    (in first-seen order); healthy or routable where any replica finds it so; its version as
    the first replica that finds it healthy reads it (else the first that lists it), and why
    it is down, while no replica finds it healthy, as the first that lists it says. The set's
    weight version is the replicas' common one, or None when they disagree: a replica that
    restarted has lost the version, and the publisher's catch-up, seeing None, states it to
    every replica again."""
    if not views:
        raise ValueError("no engine set to merge")
    targets = {view.weight_version for view in views}
    by_url: dict[str, list[EngineView]] = {}
    for view in views:
        for engine in view.engines:
            by_url.setdefault(engine.url, []).append(engine)
    merged = []
    for url, seen in by_url.items():
        healthy = [e for e in seen if e.healthy]
        merged.append(
            EngineView(
                url=url,
                healthy=bool(healthy),
                routable=any(e.routable for e in seen),
                weight_version=(healthy or seen)[0].weight_version,
                last_error=None if healthy else seen[0].last_error,
            )
        )
    return EngineSet(targets.pop() if len(targets) == 1 else None, tuple(merged))


def _label(value: Any) -> str | None:
    return None if value is None else str(value)
