"""Every SGLang command line the operator builds parses with SGLang's own CLI parser.

`operator/dressage_operator/children/engine.py` `engine_command` builds the engine pod's
`python -m sglang.launch_server ...`; the arguments after the module name must parse with the
parser `ServerArgs.add_cli_args` builds (`python/sglang/srt/server_args.py`, v0.5.2; the
flags used: `--model-path`, `--tp-size` (dest `tensor_parallel_size`), `--dtype`, `--host`,
`--port`, `--weight-version`, `--enable-metrics`, `--tokenizer-path`, plus a job's
`inference.extraArgs`).
`ServerArgs.from_cli_args` is not called: it runs device checks that need an accelerator.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from dressage_operator import children

from dressage.api import load_job
from dressage.api.sglang import parse_version
from tests.contract.support import SGLANG_VERSION

pytest.importorskip(
    "sglang", reason="SGLang's pure-Python parts are not installed: run scripts/setup.sh"
)

pytestmark = pytest.mark.contract

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))


class _Refused(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _Refused(message)


def _sglang_parser() -> argparse.ArgumentParser:
    from sglang.srt.server_args import ServerArgs

    parser = _Parser()
    ServerArgs.add_cli_args(parser)
    return parser


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_engine_command_parses_with_sglangs_parser(example: Path) -> None:
    job = load_job(example)
    if parse_version(job.spec.inference.sglang_version) > parse_version(SGLANG_VERSION):
        pytest.skip(
            f"{example.name} names SGLang {job.spec.inference.sglang_version}, newer than the "
            f"installed {SGLANG_VERSION}: its flags need that release's parser"
        )
    cmd = children.engine_command(job)
    assert cmd[:3] == ["python", "-m", "sglang.launch_server"]
    args = _sglang_parser().parse_args(cmd[3:])
    assert args.model_path == job.spec.model.staged_path(job.spec.storage.mount_path)
    assert args.tensor_parallel_size == job.spec.inference.tensor_parallel_size
    assert args.weight_version == children.engine_base_version(job)
    assert args.enable_metrics is True
    assert args.port == int(cmd[cmd.index("--port") + 1])


def test_the_parser_refuses_what_sglang_does_not_know() -> None:
    with pytest.raises(_Refused, match="--no-such-flag"):
        _sglang_parser().parse_args(["--model-path", "m", "--no-such-flag"])


def test_the_weight_update_group_the_operator_wires_fits_sglangs_ranks() -> None:
    """Each engine joins with `InitWeightsUpdateGroupReqInput` at its rank offset; SGLang
    v0.5.2 (`ModelRunner.init_weights_update_group`) puts TP rank `t` of an engine at
    `rank_offset + t`, so every engine rank must get its own rank in [1, world_size) and rank
    0 stays the trainer's."""
    from sglang.srt.managers.io_struct import InitWeightsUpdateGroupReqInput

    from dressage.api import AsyncRLJob

    job = AsyncRLJob.model_validate(
        {
            "metadata": {"name": "job-a"},
            "spec": {
                "model": {"source": "Qwen/Qwen3-8B"},
                "inference": {"replicas": 3, "tensorParallelSize": 4, "weightSync": "distributed"},
            },
        }
    )
    owner = children.Owner(name="job-a", namespace="ns", uid="uid-1")
    rendezvous = children.weight_sync_rendezvous(job, owner)
    tp = job.spec.inference.tensor_parallel_size
    ranks = []
    for offset in rendezvous.rank_offsets:
        req = InitWeightsUpdateGroupReqInput(
            master_address=rendezvous.master_address,
            master_port=rendezvous.master_port,
            rank_offset=offset,
            world_size=rendezvous.world_size,
            group_name=rendezvous.group_name,
            backend=rendezvous.backend,
        )
        ranks += [req.rank_offset + t for t in range(tp)]
    assert sorted(ranks) == list(range(1, rendezvous.world_size))
    assert req.backend == "nccl"


def test_sglang_0_5_2_has_no_deterministic_inference_flag() -> None:
    """Why the operator gates `--enable-deterministic-inference` on
    `spec.inference.sglangVersion` (>= 0.5.3): the pinned release's parser refuses it, so a
    seeded job on a 0.5.2 image would crash-loop its engines."""
    from dressage.api.sglang import (
        DETERMINISTIC_INFERENCE_SINCE,
        SGLANG_PINNED_VERSION,
        parse_version,
    )

    job = load_job(EXAMPLES[0])
    base = children.engine_command(job)[3:]
    assert parse_version(SGLANG_PINNED_VERSION) < parse_version(DETERMINISTIC_INFERENCE_SINCE)
    with pytest.raises(_Refused, match="--enable-deterministic-inference"):
        _sglang_parser().parse_args([*base, "--enable-deterministic-inference"])
