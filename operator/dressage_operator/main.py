"""`dressage-operator`: run the AsyncRLJob operator (kopf) with a liveness endpoint and metrics.

Run exactly one replica: jobs are reconciled by in-memory loops and kopf peering is off.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections.abc import Sequence

import kopf

from dressage_operator import handlers  # noqa: F401  (registers the kopf handlers)
from dressage_operator.config import OperatorConfig


def build_parser() -> argparse.ArgumentParser:
    env = OperatorConfig.from_env()
    p = argparse.ArgumentParser(prog="dressage-operator", description=__doc__.splitlines()[0])
    scope = p.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace", "-n", action="append", default=[], help="namespace to serve (repeatable)"
    )
    scope.add_argument(
        "--all-namespaces",
        "-A",
        action="store_true",
        help="serve every namespace (the default without --namespace)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=env.metrics_port,
        help="port of the operator's Prometheus /metrics (0: off)",
    )
    p.add_argument(
        "--health-port",
        type=int,
        default=8081,
        help="port of the liveness endpoint /healthz (0: off)",
    )
    p.add_argument("--runtime-image", default=env.runtime_image)
    p.add_argument("--sglang-image", default=env.sglang_image)
    p.add_argument("--resync-seconds", type=float, default=env.resync_seconds)
    p.add_argument("--scrape-seconds", type=float, default=env.scrape_seconds)
    p.add_argument(
        "--scrape-url-template",
        default=env.scrape_url_template,
        help="override the job metrics URL; {namespace} and {job} are substituted",
    )
    p.add_argument("--verbose", "-v", action="store_true")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    config = dataclasses.replace(
        OperatorConfig.from_env(),
        metrics_port=args.metrics_port,
        runtime_image=args.runtime_image,
        sglang_image=args.sglang_image,
        resync_seconds=args.resync_seconds,
        scrape_seconds=args.scrape_seconds,
        scrape_url_template=args.scrape_url_template,
    )
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    liveness = f"http://0.0.0.0:{args.health_port}/healthz" if args.health_port else None
    kopf.run(
        standalone=True,
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        liveness_endpoint=liveness,
        memo=kopf.Memo(config=config),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
