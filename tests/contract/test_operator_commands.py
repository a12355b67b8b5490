"""Every engine command line and probe the operator builds fits the SGLang release it is built
for, checked with that release's own code (the release this run of the tier imports).

`operator/dressage_operator/children/engine.py` `engine_command` builds the engine pod's
`python -m sglang.launch_server ...` for `spec.inference.sglangVersion`; the arguments after
the module name must parse with the parser `ServerArgs.add_cli_args` builds
(`python/sglang/srt/server_args.py`). The flags used: `--model-path`, `--tp-size`, `--dtype`,
`--host`, `--port`, `--weight-version`, `--enable-metrics`, `--tokenizer-path`,
`--enable-deterministic-inference` (0.5.3 and later), plus a job's `inference.extraArgs`.
Releases name the parsed fields differently: `--tp-size` is stored as `tensor_parallel_size`
in 0.5.2 and as `tp_size` in 0.5.23, so the tests ask the parser for each flag's field.
`ServerArgs.from_cli_args` is not called: it runs device checks that need an accelerator.

The probes (`dressage_operator.sglang_release`): liveness and readiness use a route the
release serves whose handler in `entrypoints/http_server.py` logs nothing and awaits nothing
(no round trip to the scheduler, so it answers while generation is paused); the startup
probe's route generates.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

import pytest
from dressage_operator import children
from dressage_operator import sglang_release as releases

from dressage.api import AsyncRLJob, JobValidationError, load_job, validate_job
from dressage.api.sglang import (
    MODEL_INFO_ROUTE_SINCE,
    at_least,
    has_access_log_exclusion,
    has_deterministic_inference,
)

pytest.importorskip(
    "sglang", reason="SGLang is not importable: the tier runs per release, sglang-compat.sh"
)

from tests.contract.support import (
    handler_awaits,
    handler_logs,
    route_handler,
    sglang_routes,
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


def _field(parser: argparse.ArgumentParser, flag: str) -> str:
    """The attribute the parser stores `flag` in."""
    (dest,) = {a.dest for a in parser._actions if flag in a.option_strings}
    return dest


def _for_release(job: AsyncRLJob, release: str, **rollout: object) -> AsyncRLJob:
    """`job` as a manifest naming SGLang `release` (what a user running it writes)."""
    wire = job.to_wire()
    spec = dict(wire["spec"])  # type: ignore[call-overload]
    spec["inference"] = {**spec.get("inference", {}), "sglangVersion": release}
    spec["rollout"] = {**spec.get("rollout", {}), **rollout}
    return validate_job({**wire, "spec": spec})


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_engine_command_parses_with_the_releases_parser(example: Path, sglang_release: str) -> None:
    try:
        job = _for_release(load_job(example), sglang_release)
    except JobValidationError as exc:
        pytest.skip(f"{example.name} needs a newer SGLang release than {sglang_release}: {exc}")
    cmd = children.engine_command(job)
    assert cmd[:3] == ["python", "-m", "sglang.launch_server"]
    parser = _sglang_parser()
    args = vars(parser.parse_args(cmd[3:]))
    assert args[_field(parser, "--model-path")] == job.spec.model.staged_path(
        job.spec.storage.mount_path
    )
    assert args[_field(parser, "--tp-size")] == job.spec.inference.tensor_parallel_size
    assert args[_field(parser, "--weight-version")] == children.engine_base_version(job)
    assert args[_field(parser, "--enable-metrics")] is True
    assert args[_field(parser, "--port")] == int(cmd[cmd.index("--port") + 1])


def test_the_parser_refuses_what_sglang_does_not_know() -> None:
    with pytest.raises(_Refused, match="--no-such-flag"):
        _sglang_parser().parse_args(["--model-path", "m", "--no-such-flag"])


def test_the_weight_update_group_the_operator_wires_fits_sglangs_ranks() -> None:
    """Each engine joins with `InitWeightsUpdateGroupReqInput` at its rank offset; SGLang
    (v0.5.2 and v0.5.23 `ModelRunner.init_weights_update_group`) puts TP rank `t` of an
    engine at `rank_offset + t`, so every engine rank must get its own rank in
    [1, world_size) and rank 0 stays the trainer's."""
    from sglang.srt.managers.io_struct import InitWeightsUpdateGroupReqInput

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


def test_deterministic_inference_is_asked_for_exactly_where_the_release_has_it(
    sglang_release: str,
) -> None:
    """Why the job model gates `rollout.seededSampling` on `inference.sglangVersion`
    (>= 0.5.3): a release without `--enable-deterministic-inference` refuses the flag, so a
    seeded job on it would crash-loop its engines. Where the release has it, the seeded job's
    command carries it and parses."""
    job = load_job(EXAMPLES[0])
    parser = _sglang_parser()
    if has_deterministic_inference(sglang_release):
        seeded = children.engine_command(_for_release(job, sglang_release, seededSampling=True))
        assert seeded.count("--enable-deterministic-inference") == 1
        args = vars(parser.parse_args(seeded[3:]))
        assert args[_field(parser, "--enable-deterministic-inference")] is True
    else:
        with pytest.raises(JobValidationError, match=r"rollout\.seededSampling"):
            _for_release(job, sglang_release, seededSampling=True)
        base = children.engine_command(_for_release(job, sglang_release))[3:]
        with pytest.raises(_Refused, match="--enable-deterministic-inference"):
            parser.parse_args([*base, "--enable-deterministic-inference"])


def test_the_routine_polls_stay_out_of_the_access_log_where_the_release_can_leave_them_out(
    sglang_release: str,
) -> None:
    """From 0.5.8 the engine command carries `--uvicorn-access-log-exclude-prefixes`; the
    release's own `UvicornAccessLogFilter` (`utils/common.py`), given what its parser makes of
    the command, drops the probes', the proxy's and Prometheus' requests and keeps a user's.
    A release without the flag gets none (its parser would refuse it)."""
    job = _for_release(load_job(EXAMPLES[0]), sglang_release)
    cmd = children.engine_command(job)
    parser = _sglang_parser()
    if not has_access_log_exclusion(sglang_release):
        assert "--uvicorn-access-log-exclude-prefixes" not in cmd
        with pytest.raises(_Refused, match="--uvicorn-access-log-exclude-prefixes"):
            parser.parse_args([*cmd[3:], "--uvicorn-access-log-exclude-prefixes", "/health"])
        return
    import logging

    from sglang.srt.utils.common import UvicornAccessLogFilter

    args = vars(parser.parse_args(cmd[3:]))
    prefixes = args[_field(parser, "--uvicorn-access-log-exclude-prefixes")]
    keeps = UvicornAccessLogFilter(prefixes).filter

    def record(line: str) -> logging.LogRecord:
        entry = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 0, "", None, None)
        entry.request_line = line
        return entry

    polled = [releases.engine_live_check(sglang_release), releases.ENGINE_GENERATE_CHECK]
    polled += ["/health", "/metrics", "/model_info?x=1"]
    assert not any(keeps(record(f"GET {path} HTTP/1.1")) for path in polled)
    assert keeps(record("POST /generate HTTP/1.1"))
    assert keeps(record("POST /update_weights_from_disk HTTP/1.1"))


def test_the_probe_routes_are_routes_the_release_serves(sglang_release: str) -> None:
    routes = sglang_routes()
    assert ("GET", releases.engine_live_check(sglang_release)) in routes
    assert ("GET", releases.ENGINE_GENERATE_CHECK) in routes


def test_the_live_probe_logs_nothing_and_never_waits_on_the_scheduler(sglang_release: str) -> None:
    """Liveness and readiness run every 10 s, through weight updates: their handler must
    answer from the HTTP process (nothing awaited) and write nothing to the log."""
    handler = route_handler("GET", releases.engine_live_check(sglang_release))
    assert handler_logs(handler) == []
    assert handler_awaits(handler) == []


def test_the_release_serves_model_info_exactly_from_the_release_the_operator_assumes(
    sglang_release: str,
) -> None:
    """`MODEL_INFO_ROUTE_SINCE` (0.5.6): from there on `/model_info` exists and
    `/get_model_info` logs a deprecation warning on every call; before it `/get_model_info`
    is quiet. Pinned here for each release of the matrix."""
    has_model_info = ("GET", "/model_info") in sglang_routes()
    assert has_model_info is at_least(sglang_release, MODEL_INFO_ROUTE_SINCE)
    old_logs = handler_logs(route_handler("GET", "/get_model_info"))
    assert bool(old_logs) is has_model_info


def test_the_startup_probe_generates_a_token() -> None:
    """The startup probe proves the model loaded and answers: its handler builds a
    `GenerateReqInput` and hands it to the tokenizer manager's `generate_request`."""
    handler = route_handler("GET", releases.ENGINE_GENERATE_CHECK)
    names = {n.id for n in ast.walk(handler) if isinstance(n, ast.Name)}
    calls = {ast.unparse(n.func) for n in ast.walk(handler) if isinstance(n, ast.Call)}
    assert "GenerateReqInput" in names
    assert any(c.endswith("tokenizer_manager.generate_request") for c in calls)
