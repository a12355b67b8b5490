"""The `dressage` command line: a thin dispatcher over subcommands.

Each subcommand lives next to the code it runs and exposes `add_arguments(parser)` and
`run(args) -> int`. Subcommand modules are imported only when chosen, so `dressage proxy` never
imports torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# name -> (module, one-line help). The module provides add_arguments() and run().
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "validate": (
        "dressage.validate_cli",
        "validate AsyncRLJob manifests (--cluster: as the operator and the API server would)",
    ),
    "run": ("dressage.runner.cli", "run an AsyncRLJob locally (CPU, embedded engine)"),
    "engine": ("dressage.engine.cli", "the embedded CPU inference engine"),
    "proxy": ("dressage.proxy.cli", "the rollout proxy"),
    "train": ("dressage.orchestrator.train_cli", "the trainer gang (torchrun entry point)"),
    "stage-model": ("dressage.model.staging", "download a hub model once onto shared storage"),
}


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dressage", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = argv[0] if argv else None
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sp = sub.add_parser(name, help=help_text)
        if name == chosen:
            module = importlib.import_module(module_name)
            module.add_arguments(sp)
            sp.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(args_list)
    args = parser.parse_args(args_list)
    code: int = args._run(args)
    return code
