"""Rollout-side staleness checks: the partial-rollout version-span limit and the non-partial
refusal. Pure functions over version labels.

Versions are counted in observation order, non-real versions (missing, empty, `unknown`,
`-1`) are dropped, and `version_switches = max(0, version_span - 1)`. With
`--max-partial-rollout-preempts N` a trajectory may span at most N+1 versions.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dressage.proxy import errors
from dressage.rollout.versions import distinct_real_versions


class PartialRolloutStalenessExceeded(Exception):
    """A partial-rollout trajectory would span more versions than the limit allows.

    `detail` holds `versions`, `version_span`, `version_switches`, `max_preempts` and
    `max_version_span`; the proxy answers it as HTTP 502 `partial_rollout_staleness_exceeded`.
    """

    error_name = errors.PARTIAL_ROLLOUT_STALENESS_EXCEEDED
    status = 502

    def __init__(self, detail: dict[str, Any]) -> None:
        self.detail = detail
        super().__init__(
            f"partial rollout spans {detail['version_span']} versions "
            f"({detail['version_switches']} switches), more than max_preempts="
            f"{detail['max_preempts']} allows"
        )


class VersionChangedWithoutPartialRollout(Exception):
    """Without partial rollout, a trajectory continued under another version than before.

    Answered as HTTP 409 `version_changed_without_partial_rollout`; `detail` holds `versions`
    (all real versions of the trajectory in observation order), `session_versions` and
    `candidate_versions`.
    """

    error_name = errors.VERSION_CHANGED_WITHOUT_PARTIAL_ROLLOUT
    status = 409

    def __init__(self, detail: dict[str, Any]) -> None:
        self.detail = detail
        super().__init__(
            f"trajectory would continue under version(s) {detail['candidate_versions']} after "
            f"earlier turns under {detail['session_versions']}, and partial rollout is off"
        )


def partial_version_span_detail(
    session_versions: Iterable[object],
    candidate_versions: Iterable[object],
    max_preempts: int,
) -> dict[str, Any]:
    """The detail of the span check: merged real versions in observation order and counts."""
    versions = distinct_real_versions([*session_versions, *candidate_versions])
    span = len(versions)
    return {
        "versions": versions,
        "version_span": span,
        "version_switches": max(0, span - 1),
        "max_preempts": max_preempts,
        "max_version_span": max_preempts + 1,
    }


def _raise_if_partial_version_span_exceeded(
    session_versions: Iterable[object],
    candidate_versions: Iterable[object],
    max_preempts: int | None,
) -> None:
    """Raise `PartialRolloutStalenessExceeded` when the merged span exceeds the limit.

    `session_versions` are the trajectory's earlier response versions, `candidate_versions`
    those of the generation being checked. `max_preempts=None` disables the limit.
    """
    if max_preempts is None:
        return
    detail = partial_version_span_detail(session_versions, candidate_versions, max_preempts)
    if detail["version_switches"] > max_preempts:
        raise PartialRolloutStalenessExceeded(detail)


def raise_if_version_changed(
    session_versions: Iterable[object],
    candidate_versions: Iterable[object],
) -> None:
    """Without partial rollout a trajectory keeps one version: raise when it would not."""
    earlier = distinct_real_versions(session_versions)
    candidate = distinct_real_versions(candidate_versions)
    merged = distinct_real_versions([*earlier, *candidate])
    if len(merged) > 1:
        raise VersionChangedWithoutPartialRollout(
            {
                "versions": merged,
                "session_versions": earlier,
                "candidate_versions": candidate,
            }
        )
