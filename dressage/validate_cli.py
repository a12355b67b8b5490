"""`dressage validate JOB.yaml...`: check manifests against the job model; with `--cluster`,
every refusal a cluster would make of them, offline.

Without `--cluster` a manifest is checked as `dressage run` reads it (the job model). With it,
each AsyncRLJob in the files is checked as the operator and the API server would check it
(`dressage_operator.cluster_check`, the operator's own checks): the CRD's rules, what a
cluster cannot run, this cluster's limits, the children against the Kubernetes schemas and
the API server's rules, a namespace's Pod Security level and its ResourceQuotas
(`--resource-quota`). The operator's checks need the
`operator` extra; this command is an entry point, the one layer that may reach the operator's
package, and imports it only for `--cluster`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from dressage.api.loader import JobValidationError, load_job

if TYPE_CHECKING:
    from dressage_operator import cluster_check

OPERATOR_EXTRA = "pip install 'dressage[operator]'"
REASONS = {
    "Invalid": "the API server refuses the job object itself (kubectl apply fails)",
    "InvalidSpec": "the operator fails the job before creating anything (SpecValid=False)",
    "LimitExceeded": "the operator fails the job: above this cluster's limits (SpecValid=False)",
    "ChildRefused": "the API server refuses a child and the operator fails the job",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifests", nargs="+", help="AsyncRLJob YAML files")
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="check as the operator and the API server would (needs the operator extra); "
        "the operator's settings come from DRESSAGE_OPERATOR_* (the chart's limits: "
        "DRESSAGE_OPERATOR_LIMITS)",
    )
    parser.add_argument(
        "--namespace", "-n", default="default", help="the job's namespace (with --cluster)"
    )
    parser.add_argument(
        "--kubernetes-version",
        default=None,
        help="the cluster's Kubernetes release, e.g. 1.31, whose schemas check the children "
        "(with --cluster; default: the operator's)",
    )
    parser.add_argument(
        "--pod-security",
        choices=("privileged", "baseline", "restricted"),
        default="privileged",
        help="the Pod Security Standard the namespace enforces (its label "
        "pod-security.kubernetes.io/enforce; with --cluster; default: none)",
    )
    parser.add_argument(
        "--resource-quota",
        action="append",
        default=[],
        metavar="FILE",
        help="a YAML file with the namespace's ResourceQuota objects (`kubectl get "
        "resourcequota -n NAMESPACE -o yaml`); with --cluster, the pods are checked against "
        "them and a container without the requests or limits they track is named (repeatable)",
    )


def run(args: argparse.Namespace) -> int:
    if args.cluster:
        return _run_cluster(args)
    failed = 0
    for path in args.manifests:
        try:
            job = load_job(path)
        except (JobValidationError, OSError) as exc:
            print(exc, file=sys.stderr)
            failed += 1
            continue
        print(f"{path}: AsyncRLJob {job.metadata.name} is valid")
    return 1 if failed else 0


def _run_cluster(args: argparse.Namespace) -> int:
    try:
        from dressage_operator import children_check, cluster_check, schemas
        from dressage_operator.config import OperatorConfig
    except ModuleNotFoundError as exc:
        print(
            f"dressage validate --cluster runs the operator's checks, which need the operator "
            f"extra (missing module {exc.name!r}): {OPERATOR_EXTRA}",
            file=sys.stderr,
        )
        return 2
    try:
        config = OperatorConfig.from_env(dict(os.environ))
    except ValueError as exc:
        print(f"the operator's settings: {exc}", file=sys.stderr)
        return 2
    release = schemas.schema_release(args.kubernetes_version, children_check.DEFAULT_SCHEMA_RELEASE)
    quotas: list[Mapping[str, Any]] = []
    for path in args.resource_quota:
        try:
            quotas += _documents(Path(path), cluster_check.quota_documents, "ResourceQuota")
        except (JobValidationError, OSError) as exc:
            print(exc, file=sys.stderr)
            return 2
    failed = 0
    for path in args.manifests:
        try:
            jobs = _jobs(Path(path), cluster_check.job_documents)
        except (JobValidationError, OSError) as exc:
            print(exc, file=sys.stderr)
            failed += 1
            continue
        for body in jobs:
            found = cluster_check.check(
                body,
                config,
                namespace=args.namespace,
                release=release,
                pod_security=args.pod_security,
                quotas=quotas,
            )
            _report(path, found)
            failed += found.refused
    return 1 if failed else 0


def _jobs(path: Path, select: Any) -> list[Mapping[str, Any]]:
    return _documents(path, select, "AsyncRLJob")


def _documents(path: Path, select: Any, kind: str) -> list[Mapping[str, Any]]:
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    except yaml.YAMLError as exc:
        raise JobValidationError(str(path), [("<yaml>", str(exc))]) from None
    found: list[Mapping[str, Any]] = select(docs)
    if not found:
        raise JobValidationError(str(path), [("kind", f"no document of kind {kind}")])
    return found


def _report(path: str, found: cluster_check.ClusterCheck) -> None:
    """A refused job: each stage's refusals, one `field: message` line each, on stderr. A
    valid one: what was checked, on stdout. Warnings on stderr either way."""
    for warning in found.warnings:
        print(f"{path}: warning: {warning}", file=sys.stderr)
    if found.refused:
        print(f"{path}: AsyncRLJob {found.name} would be refused on a cluster:", file=sys.stderr)
        for stage in found.stages:
            print(f"  {stage.reason}: {REASONS.get(stage.reason, '')}", file=sys.stderr)
            for refusal in stage.refusals:
                print(f"    {refusal}", file=sys.stderr)
        return
    print(f"{path}: AsyncRLJob {found.name} is valid on a cluster; checked:")
    for what in found.checked:
        print(f"  - {what}")
