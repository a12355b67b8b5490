"""`dressage validate JOB.yaml...`: check manifests against the job model."""

from __future__ import annotations

import argparse
import sys

from dressage.api.loader import JobValidationError, load_job


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifests", nargs="+", help="AsyncRLJob YAML files")


def run(args: argparse.Namespace) -> int:
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
