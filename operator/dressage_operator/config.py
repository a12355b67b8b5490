"""Operator-wide settings: images, intervals and the scrape target.

`OperatorConfig.from_env` reads the `DRESSAGE_OPERATOR_*` variables; `main` overrides them with
its flags and hands the result to the handlers through kopf's memo.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from dressage.api.images import image_reference_problem
from dressage.api.sglang import SGLANG_DEFAULT_VERSION
from dressage_operator.limits import DEFAULT_LIMITS, LIMITS_ENV, parse_limits

DEFAULT_RUNTIME_IMAGE = "ghcr.io/dressage/dressage-runtime:0.1.0"
DEFAULT_SGLANG_IMAGE = f"ghcr.io/dressage/dressage-sglang:0.1.0-sglang{SGLANG_DEFAULT_VERSION}"
"""The engine image's tag names the SGLang release it runs: the default of
`spec.inference.sglangVersion` (the chart's `jobImages.sglang.tag`)."""


@dataclass(frozen=True)
class OperatorConfig:
    """Settings that are the operator's, not the job's."""

    runtime_image: str = DEFAULT_RUNTIME_IMAGE
    """Image of trainer and proxy pods when the job names none."""
    sglang_image: str = DEFAULT_SGLANG_IMAGE
    """Image of engine pods when the job names none."""
    resync_seconds: float = 30.0
    """A job is reconciled at least this often even when nothing changes."""
    scrape_seconds: float = 15.0
    """How often a running job's metrics are read into its status."""
    scrape_timeout_seconds: float = 3.0
    scrape_url_template: str | None = None
    """Overrides the scrape target; `{namespace}` and `{job}` are substituted. Unset: trainer
    rank 0 through the headless Service (`naming.metrics_url`)."""
    metrics_port: int = 8080
    """Port of the operator's own Prometheus `/metrics`; 0 disables the server."""
    network_policies: bool = False
    """Give each job a NetworkPolicy that lets only the job's own pods reach its engines and
    proxy (the chart's `networkPolicy.enabled`)."""
    limits: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_LIMITS))
    """What one job may ask (`dressage_operator.limits`; the chart's `limits:`)."""
    max_creates_per_cycle: int = 50
    """Children one job's reconcile creates at most per cycle before it yields to the other
    jobs and continues (the chart's `maxCreatesPerCycle`): a large job being created never
    keeps a small one waiting for more than a few cycles."""
    check_children: bool = True
    """Check every child of a job against the API server's schema and rules before creating
    any (`preflight`; the chart's `checkChildren`). Off, a child the checks would refuse is
    sent and refused by the API server itself."""

    def __post_init__(self) -> None:
        for setting, image in (
            ("runtime image (DRESSAGE_OPERATOR_RUNTIME_IMAGE)", self.runtime_image),
            ("SGLang image (DRESSAGE_OPERATOR_SGLANG_IMAGE)", self.sglang_image),
        ):
            problem = image_reference_problem(image)
            if problem is not None:
                raise ValueError(f"the operator's {setting}: {problem}")

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> OperatorConfig:
        """Read `DRESSAGE_OPERATOR_*` variables (the chart sets them)."""
        e = dict(os.environ if env is None else env)
        p = "DRESSAGE_OPERATOR_"
        return cls(
            runtime_image=e.get(p + "RUNTIME_IMAGE", DEFAULT_RUNTIME_IMAGE),
            sglang_image=e.get(p + "SGLANG_IMAGE", DEFAULT_SGLANG_IMAGE),
            resync_seconds=float(e.get(p + "RESYNC_SECONDS", "30")),
            scrape_seconds=float(e.get(p + "SCRAPE_SECONDS", "15")),
            scrape_timeout_seconds=float(e.get(p + "SCRAPE_TIMEOUT_SECONDS", "3")),
            scrape_url_template=e.get(p + "SCRAPE_URL_TEMPLATE") or None,
            metrics_port=int(e.get(p + "METRICS_PORT", "8080")),
            network_policies=e.get(p + "NETWORK_POLICIES", "").lower() in ("1", "true", "yes"),
            limits=parse_limits(e.get(LIMITS_ENV, "")),
            max_creates_per_cycle=max(1, int(e.get(p + "MAX_CREATES_PER_CYCLE", "50"))),
            check_children=e.get(p + "CHECK_CHILDREN", "true").lower() not in ("0", "false", "no"),
        )

    def scrape_url(self, namespace: str, job: str) -> str:
        from dressage_operator.naming import metrics_url

        if self.scrape_url_template:
            return self.scrape_url_template.format(namespace=namespace, job=job)
        return metrics_url(job, namespace)
