"""The `dressage` command line: `dressage COMMAND`, one subcommand per program of a job.

Each subcommand lives next to the code it runs and exposes `add_arguments(parser)` and
`run(args) -> int`. Subcommand modules are imported only when chosen, so `dressage proxy` never
imports torch.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys
from collections.abc import Sequence

import dressage

DESCRIPTION = """\
Dressage trains LLM agents with asynchronous reinforcement learning and keeps stale data out
of the trainer. Rollout and training run at the same time; every generated token carries the
weight version that produced it, and two controls bound staleness: a trainer batch holds
trajectories of the newest `keepVersions` weight versions only, and a generation may span at
most `maxPartialRolloutPreempts` + 1 versions. The same AsyncRLJob manifest runs on a laptop
(`dressage run`) and on a Kubernetes cluster (the operator).\
"""

EPILOG = """\
Start with `dressage validate JOB.yaml` to check a manifest, then `dressage run JOB.yaml` to
train it locally (rerunning it resumes; `--fresh` starts over). `dressage COMMAND --help`
describes each command. On a cluster the operator runs `engine`, `proxy` and `train` itself.\
"""

# name -> (module, one-line help). The module provides add_arguments() and run().
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "validate": (
        "dressage.validate_cli",
        "validate AsyncRLJob manifests (--cluster: as the operator and the API server would)",
    ),
    "run": (
        "dressage.runner.cli",
        "train an AsyncRLJob locally (CPU or one GPU, embedded engine); a rerun resumes",
    ),
    "eval": (
        "dressage.runner.eval_cli",
        "evaluate a job's weights on its held-out prompts (a version, a checkpoint, or a "
        "running job's proxy)",
    ),
    "engine": (
        "dressage.engine.embedded.cli",
        "serve the embedded inference engine (CPU or one GPU)",
    ),
    "proxy": ("dressage.proxy.cli", "serve the rollout proxy between agents and engines"),
    "train": (
        "dressage.orchestrator.train_cli",
        "run the trainer gang of a cluster job (torchrun entry point)",
    ),
    "export": (
        "dressage.trainer.export_cli",
        "export a LoRA version: the PEFT adapter, or (--merge) a merged Hugging Face checkpoint",
    ),
    "stage-model": (
        "dressage.model.staging",
        "download a Hugging Face model once onto shared storage",
    ),
}


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dressage",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {version()}", help="print the version"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = argv[0] if argv else None
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sp = sub.add_parser(name, help=help_text)
        if name == chosen:
            module = importlib.import_module(module_name)
            module.add_arguments(sp)
            sp.set_defaults(_run=module.run)
    return parser


def version() -> str:
    """The installed distribution's version, or the package's own when run from a checkout
    that was never installed (`PYTHONPATH=. python -m dressage`)."""
    try:
        return importlib.metadata.version("dressage")
    except importlib.metadata.PackageNotFoundError:
        return dressage.__version__


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(args_list)
    args = parser.parse_args(args_list)
    code: int = args._run(args)
    return code
