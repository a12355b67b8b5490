"""Rollout-side staleness: the version rule every generated turn is checked against.

The rule is chosen once from the proxy's config (`version_rule`) and handed to the generator:

- `PartialRolloutSpanLimit` (`--dressage-partial-rollout`): a generation interrupted by a
  weight update resumes from its partial output, so a trajectory may mix versions; with
  `--max-partial-rollout-preempts N` it may span at most N+1 of them
  (`raise_if_partial_version_span_exceeded`, 502 `partial_rollout_staleness_exceeded`);
- `SingleVersion` (without partial rollout): an interrupted generation starts over from its
  prompt, and a trajectory keeps the one version of its first turn
  (`raise_if_version_changed`, 409 `version_changed_without_partial_rollout`).

Versions are counted in observation order, non-real versions (missing, empty, `unknown`,
`-1`) are dropped, and `version_switches = max(0, version_span - 1)`. Everything here is pure.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from dressage.data.groups import is_evaluation_group
from dressage.data.versions import distinct_real_versions
from dressage.proxy import errors

if TYPE_CHECKING:
    from dressage.proxy.config import ProxyConfig


class StalenessRefusal(Exception):
    """A turn the version rule refuses; the proxy stops the trajectory and answers
    `status` with the error `error_name` and `detail`.

    Being a `StalenessRefusal` is what makes a refusal a staleness failure: the rollout side
    counts an attempt refused with any of `staleness_error_names()` as one, and nothing else
    decides it."""

    error_name: ClassVar[str]
    status: ClassVar[int]

    def __init__(self, message: str, detail: dict[str, Any]) -> None:
        super().__init__(message)
        self.detail = detail


def staleness_error_names() -> frozenset[str]:
    """The error names the proxy answers for a staleness refusal: one per `StalenessRefusal`
    type (the partial-rollout span limit's 502, the single-version rule's 409)."""
    found: set[str] = set()
    todo = list(StalenessRefusal.__subclasses__())
    while todo:
        refusal = todo.pop()
        todo.extend(refusal.__subclasses__())
        if "error_name" in vars(refusal):
            found.add(refusal.error_name)
    return frozenset(found)


class PartialRolloutStalenessExceeded(StalenessRefusal):
    """A partial-rollout trajectory would span more versions than the limit allows.

    `detail` holds `versions`, `version_span`, `version_switches`, `max_preempts` and
    `max_version_span`; the proxy answers it as HTTP 502 `partial_rollout_staleness_exceeded`.
    """

    error_name = errors.PARTIAL_ROLLOUT_STALENESS_EXCEEDED
    status = 502

    def __init__(self, detail: dict[str, Any]) -> None:
        super().__init__(
            f"partial rollout spans {detail['version_span']} versions "
            f"({detail['version_switches']} switches), more than max_preempts="
            f"{detail['max_preempts']} allows",
            detail,
        )


class VersionChangedWithoutPartialRollout(StalenessRefusal):
    """Without partial rollout, a trajectory continued under another version than before.

    Answered as HTTP 409 `version_changed_without_partial_rollout`; `detail` holds `versions`
    (all real versions of the trajectory in observation order), `session_versions` and
    `candidate_versions`.
    """

    error_name = errors.VERSION_CHANGED_WITHOUT_PARTIAL_ROLLOUT
    status = 409

    def __init__(self, detail: dict[str, Any]) -> None:
        super().__init__(
            f"trajectory would continue under version(s) {detail['candidate_versions']} after "
            f"earlier turns under {detail['session_versions']}, and partial rollout is off",
            detail,
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


def raise_if_partial_version_span_exceeded(
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


_raise_if_partial_version_span_exceeded = raise_if_partial_version_span_exceeded
"""The design's name of the span check (`docs/staleness.md`)."""


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


class VersionRule(abc.ABC):
    """How a trajectory's turns may relate to weight versions."""

    resumes_partial_output: ClassVar[bool]
    """Whether a generation interrupted by a weight update resumes from its partial output
    (its tokens keeping their versions) rather than starting over from its prompt."""

    @abc.abstractmethod
    def check(
        self, session_versions: Iterable[object], candidate_versions: Iterable[object]
    ) -> None:
        """Raise a `StalenessRefusal` when a turn with `candidate_versions` may not join a
        trajectory whose earlier responses had `session_versions`."""


@dataclass(frozen=True)
class PartialRolloutSpanLimit(VersionRule):
    """Partial rollout: versions may mix, at most `max_preempts` switches (None: no limit)."""

    max_preempts: int | None = None
    resumes_partial_output: ClassVar[bool] = True

    def check(
        self, session_versions: Iterable[object], candidate_versions: Iterable[object]
    ) -> None:
        raise_if_partial_version_span_exceeded(
            session_versions, candidate_versions, self.max_preempts
        )


@dataclass(frozen=True)
class SingleVersion(VersionRule):
    """Without partial rollout: every turn of a trajectory comes from one version."""

    resumes_partial_output: ClassVar[bool] = False

    def check(
        self, session_versions: Iterable[object], candidate_versions: Iterable[object]
    ) -> None:
        raise_if_version_changed(session_versions, candidate_versions)


def rule_for_session(rule: VersionRule, instance_id: str | None) -> VersionRule:
    """The rule a session's turns follow: the proxy's own, except for an evaluation group's
    (`dressage.data.groups.is_evaluation_group`), which is never resumed across a weight update
    and keeps one version (`SingleVersion`) even under partial rollout."""
    return SingleVersion() if is_evaluation_group(instance_id) else rule


def version_rule(config: ProxyConfig) -> VersionRule:
    """The rule of `config`: its partial-rollout setting and span limit."""
    if config.partial_rollout:
        return PartialRolloutSpanLimit(config.max_partial_rollout_preempts)
    return SingleVersion()
