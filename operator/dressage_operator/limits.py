"""What one job may ask of the cluster: the operator's limits, which a cluster admin sets.

The CRD carries generous static maxima (`dressage.api.job`, e.g. `MAX_INFERENCE_REPLICAS`);
below them each cluster sets its own limits in the chart's values (`limits:`), which reach the
operator as one JSON object in `DRESSAGE_OPERATOR_LIMITS`. A job over a limit is refused before
anything is created: `SpecValid=False`, reason `LimitExceeded`, the message naming the field,
the value, the limit and the chart key that raises it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from dressage.api.job import AsyncRLJobSpec


@dataclass(frozen=True)
class Limit:
    """One bounded field of a job's spec."""

    key: str
    """The key under the chart's `limits:` and in `DRESSAGE_OPERATOR_LIMITS`."""
    field: str
    """The spec field it bounds, as the refusal names it."""
    default: int
    read: Callable[[AsyncRLJobSpec], int]


LIMITS: tuple[Limit, ...] = (
    Limit("inferenceReplicas", "spec.inference.replicas", 64, lambda s: s.inference.replicas),
    # The most engines the autoscaler may start counts against the same limit.
    Limit(
        "inferenceReplicas",
        "spec.inference.autoscaling.maxReplicas",
        64,
        lambda s: 0 if s.inference.autoscaling is None else s.inference.autoscaling.max_replicas,
    ),
    Limit(
        "tensorParallelSize",
        "spec.inference.tensorParallelSize",
        8,
        lambda s: s.inference.tensor_parallel_size,
    ),
    Limit("trainerNodes", "spec.trainer.nodes", 32, lambda s: s.trainer.nodes),
    Limit("gpusPerNode", "spec.trainer.gpusPerNode", 8, lambda s: s.trainer.gpus_per_node),
    Limit("rolloutConcurrency", "spec.rollout.concurrency", 4096, lambda s: s.rollout.concurrency),
    Limit("rolloutGroupSize", "spec.rollout.groupSize", 1024, lambda s: s.rollout.group_size),
    Limit("rolloutBatchSize", "spec.rollout.batchSize", 4096, lambda s: s.rollout.batch_size),
    Limit(
        "proxyMaxConcurrency",
        "spec.proxy.maxConcurrency",
        16384,
        lambda s: s.proxy.max_concurrency,
    ),
)
DEFAULT_LIMITS: dict[str, int] = {limit.key: limit.default for limit in LIMITS}
LIMITS_ENV = "DRESSAGE_OPERATOR_LIMITS"


def parse_limits(text: str) -> dict[str, int]:
    """The limits from `DRESSAGE_OPERATOR_LIMITS` (a JSON object of positive integers, keys as
    in `LIMITS`), over the defaults; an unknown key or a bad value is an error naming it."""
    limits = dict(DEFAULT_LIMITS)
    if not text.strip():
        return limits
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{LIMITS_ENV}: not a JSON object: {exc}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{LIMITS_ENV}: not a JSON object: {text!r}")
    for key, value in raw.items():
        if key not in limits:
            raise ValueError(
                f"{LIMITS_ENV}: unknown limit {key!r} (known: {', '.join(sorted(limits))})"
            )
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{LIMITS_ENV}: {key} must be a positive integer, not {value!r}")
        limits[key] = value
    return limits


def limit_errors(spec: AsyncRLJobSpec, limits: Mapping[str, int]) -> list[tuple[str, str]]:
    """`(field, message)` for each field of `spec` above this cluster's limit."""
    errors = []
    for limit in LIMITS:
        value, bound = limit.read(spec), limits.get(limit.key, limit.default)
        if value > bound:
            errors.append(
                (
                    limit.field,
                    f"{value} is above this cluster's limit of {bound} (an admin raises it "
                    f"with the operator chart's limits.{limit.key})",
                )
            )
    return errors
