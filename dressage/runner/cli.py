"""`dressage run JOB.yaml`: run an AsyncRLJob locally."""

from __future__ import annotations

import argparse
import sys

from dressage.api.loader import JobValidationError, load_job


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", help="AsyncRLJob YAML file")


def run(args: argparse.Namespace) -> int:
    try:
        job = load_job(args.manifest)
    except (JobValidationError, OSError) as exc:
        print(exc, file=sys.stderr)
        return 2
    spec = job.spec
    print(
        f"AsyncRLJob {job.metadata.name}: model={spec.model.source} task={spec.task.name} "
        f"mode={spec.rollout.mode.value} keepVersions={spec.staleness.keep_versions} "
        f"maxPartialRolloutPreempts={spec.staleness.max_partial_rollout_preempts}"
    )
    print("the local trainer is not available yet; the job validated and nothing was run")
    return 0
