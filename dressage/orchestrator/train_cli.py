"""`dressage train --config JOB.yaml`: the trainer gang's entry point (one process per rank).

Launched by torchrun (or one process per pod) with the rendezvous environment the operator
sets: `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`, `RANK` or `NODE_RANK`:

    torchrun --nnodes N --node_rank R --master_addr A --master_port P \\
        -m dressage train --config /etc/dressage/job.yaml

Rank 0 collects batches through the proxy (`--proxy-url` or `DRESSAGE_PROXY_URL`), publishes
weights to the engines (`--engine-urls` or `DRESSAGE_ENGINE_URLS`, comma-separated), writes
weights and checkpoints under `--workdir` (or `DRESSAGE_WORKDIR`; default
`<spec.storage.mountPath>/<job>`), and serves `/metrics` on `--metrics-port` (or
`DRESSAGE_METRICS_PORT`; default 9400). `--config` falls back to `DRESSAGE_JOB_CONFIG`,
`DRESSAGE_ROLLOUT_MAX_RETRIES` overrides `spec.rollout.maxRetries`, and `DRESSAGE_PROXY_TOKEN`
is the proxy's bearer token when it requires one. With `spec.inference.weightSync:
distributed`, rank 0 serves the weight-update group's rendezvous for the engines at
`DRESSAGE_WEIGHT_SYNC_ADDRESS` (the name the engines reach it by; default `MASTER_ADDR`) and
`DRESSAGE_WEIGHT_SYNC_PORT` (default `spec.inference.weightSyncPort`), over NCCL on a GPU
trainer and gloo on a CPU one. Every rank resumes from the same checkpoint
and runs the job's pipeline (`dressage.orchestrator.pipeline`), as `dressage run` does. The
engines and the proxy are not started here: on a cluster they are their own pods, and locally
`dressage run` starts them.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from dressage.api.figures import line_parts
from dressage.api.loader import JobValidationError, load_job
from dressage.proxy.affinity import dns_target, parse_replica_urls

if TYPE_CHECKING:
    from dressage.api.job import AsyncRLJob

ENGINE_URLS_ENV = "DRESSAGE_ENGINE_URLS"
PROXY_URL_ENV = "DRESSAGE_PROXY_URL"
JOB_CONFIG_ENV = "DRESSAGE_JOB_CONFIG"
METRICS_PORT_ENV = "DRESSAGE_METRICS_PORT"
WORKDIR_ENV = "DRESSAGE_WORKDIR"
MAX_RETRIES_ENV = "DRESSAGE_ROLLOUT_MAX_RETRIES"
PROXY_TOKEN_ENV = "DRESSAGE_PROXY_TOKEN"
WEIGHT_SYNC_ADDRESS_ENV = "DRESSAGE_WEIGHT_SYNC_ADDRESS"
WEIGHT_SYNC_PORT_ENV = "DRESSAGE_WEIGHT_SYNC_PORT"
ENV_VARS = (
    JOB_CONFIG_ENV,
    ENGINE_URLS_ENV,
    PROXY_URL_ENV,
    METRICS_PORT_ENV,
    WORKDIR_ENV,
    MAX_RETRIES_ENV,
    PROXY_TOKEN_ENV,
    WEIGHT_SYNC_ADDRESS_ENV,
    WEIGHT_SYNC_PORT_ENV,
)
"""Every variable `dressage train` reads (each the fallback of a flag, or of the job's field)."""
DEFAULT_METRICS_PORT = 9400


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        default=None,
        metavar="JOB.yaml",
        help=f"AsyncRLJob manifest (${JOB_CONFIG_ENV})",
    )
    parser.add_argument("--engine-urls", default=None, help=f"comma-separated (${ENGINE_URLS_ENV})")
    parser.add_argument(
        "--proxy-url",
        default=None,
        help=f"rollout proxy URL, or its replicas' URLs comma-separated, or "
        f"dns+http://HOST:PORT of their headless Service (${PROXY_URL_ENV})",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help=f"run directory: weights/, checkpoints/, cache/ (${WORKDIR_ENV}; default "
        "<spec.storage.mountPath>/<job>)",
    )
    parser.add_argument("--steps", type=int, default=None, help="override spec.training.steps")
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help=f"rank 0 /metrics port (${METRICS_PORT_ENV}; default {DEFAULT_METRICS_PORT})",
    )
    parser.add_argument(
        "--mask-nonlast-version-tokens",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="train only tokens of a sample's last weight version, or not (default: the job's "
        "spec.proxy.maskNonlastVersionTokens)",
    )
    parser.add_argument("--cache-dir", type=Path, default=None, help="model and warm-start cache")


@dataclass(frozen=True)
class Wiring:
    """Where the trainer finds its job, engines and proxy, and where it writes (flags first,
    then the environment the operator sets on trainer pods)."""

    config: str
    engine_urls: list[str]
    proxy_url: str
    metrics_port: int
    workdir: Path | None
    max_retries: int | None
    """`spec.rollout.maxRetries` override (`$DRESSAGE_ROLLOUT_MAX_RETRIES`)."""
    proxy_token: str | None = None
    """The proxy's bearer token (`$DRESSAGE_PROXY_TOKEN`), when the proxy requires one."""
    weight_sync_address: str | None = None
    """Where the engines reach trainer rank 0 for the weight-update group
    (`$DRESSAGE_WEIGHT_SYNC_ADDRESS`, else `$MASTER_ADDR`)."""
    weight_sync_port: int | None = None
    """The group's port on rank 0 (`$DRESSAGE_WEIGHT_SYNC_PORT`, else the job's
    `spec.inference.weightSyncPort`)."""


def _env_int(environ: Mapping[str, str], name: str) -> int | None:
    raw = environ.get(name, "")
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name} must be an integer, got {raw!r}") from None


def resolve_wiring(args: argparse.Namespace, environ: Mapping[str, str]) -> Wiring:
    """The trainer's wiring from parsed flags and an environment (pure; raises ValueError
    naming the missing flag or variable)."""
    config = args.config or environ.get(JOB_CONFIG_ENV, "")
    if not config:
        raise ValueError(f"dressage train needs --config (or ${JOB_CONFIG_ENV})")
    engine_urls = [
        u for u in (args.engine_urls or environ.get(ENGINE_URLS_ENV, "")).split(",") if u
    ]
    proxy_url = args.proxy_url or environ.get(PROXY_URL_ENV, "")
    if not engine_urls or not proxy_url:
        raise ValueError(
            f"dressage train needs --engine-urls (or ${ENGINE_URLS_ENV}) and --proxy-url "
            f"(or ${PROXY_URL_ENV})"
        )
    try:
        if dns_target(proxy_url) is None:
            parse_replica_urls(proxy_url)
    except ValueError as exc:
        raise ValueError(f"--proxy-url (${PROXY_URL_ENV}): {exc}") from None
    port = args.metrics_port
    if port is None:
        port = _env_int(environ, METRICS_PORT_ENV)
    workdir = args.workdir or (Path(environ[WORKDIR_ENV]) if environ.get(WORKDIR_ENV) else None)
    max_retries = _env_int(environ, MAX_RETRIES_ENV)
    if max_retries is not None and max_retries < 0:
        raise ValueError(f"environment variable {MAX_RETRIES_ENV} must be >= 0")
    return Wiring(
        config=config,
        engine_urls=engine_urls,
        proxy_url=proxy_url,
        metrics_port=DEFAULT_METRICS_PORT if port is None else port,
        workdir=workdir,
        max_retries=max_retries,
        proxy_token=environ.get(PROXY_TOKEN_ENV) or None,
        weight_sync_address=(
            environ.get(WEIGHT_SYNC_ADDRESS_ENV) or environ.get("MASTER_ADDR") or None
        ),
        weight_sync_port=_env_int(environ, WEIGHT_SYNC_PORT_ENV),
    )


def load_wired_job(wiring: Wiring) -> AsyncRLJob:
    """The job manifest with the wiring's overrides applied."""
    job = load_job(wiring.config)
    if wiring.max_retries is not None:
        job.spec.rollout.max_retries = wiring.max_retries
    return job


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        wiring = resolve_wiring(args, os.environ)
        job = load_wired_job(wiring)
        from dressage.tasks.usercode import enter_code_dir

        # The job's own rewards, environments, agents and data (`spec.code.path`).
        enter_code_dir(job.spec)
    except (JobValidationError, OSError, ValueError) as exc:
        print(exc, file=sys.stderr)
        return 2
    from dressage.trainer.distributed import exit_process

    code = asyncio.run(_train(job, args, wiring))
    # After the event loop and every client are closed: a rank of a gang ends without the
    # interpreter's shutdown, where gloo's threads could abort the process.
    return exit_process(code)


async def _train(job: AsyncRLJob, args: argparse.Namespace, wiring: Wiring) -> int:
    from dressage.evaluation.figures import Evaluation
    from dressage.evaluation.log import EvaluationLog
    from dressage.model.warmstart import initial_model_dir
    from dressage.orchestrator.loop import StepRecord
    from dressage.orchestrator.metrics import RunMetrics
    from dressage.orchestrator.pipeline import Endpoints, run_pipeline, weight_sync_wiring
    from dressage.tracking import RunContext, Trackers, TrackingError
    from dressage.trainer.checkpoint import RunDir
    from dressage.trainer.distributed import (
        barrier,
        current_env,
        device_for,
        init_distributed,
        shutdown_distributed,
    )
    from dressage.trainer.grpo import quiet_transformers
    from dressage.trainer.session import TrainerSession, trainer_config

    quiet_transformers()
    spec = job.spec
    env = current_env()
    device = device_for(env, use_gpu=spec.trainer.gpus_per_node > 0)
    init_distributed(env, device, timeout=spec.trainer.distributed_timeout_seconds)
    root = wiring.workdir or Path(spec.storage.mount_path) / job.metadata.name
    # The cache must be shared by every rank: by default it sits on the job's storage.
    cache_dir: Path = args.cache_dir or root / "cache"
    config = trainer_config(spec)
    if args.mask_nonlast_version_tokens is not None:
        config = replace(config, mask_nonlast_version_tokens=args.mask_nonlast_version_tokens)
    steps = args.steps or spec.training.steps
    try:
        # Rank 0 builds (and warm-starts) the initial model into the shared cache first.
        if env.is_main:
            model_dir = initial_model_dir(spec, cache_dir)
        barrier(env)
        if not env.is_main:
            model_dir = initial_model_dir(spec, cache_dir, log=lambda _: None)
        session = TrainerSession.open(
            spec, model_dir=model_dir, run_dir=RunDir(root), env=env, device=device, config=config
        )
        if not env.is_main:
            await run_pipeline(job, session, endpoints=None, steps=steps)
            return 0
        state = session.state
        print(f"rank 0/{env.world_size}: step {state.step}, version {state.version}", flush=True)
        try:  # rank 0 logs the run to `spec.tracking`, opened before the first step
            trackers = Trackers.open(
                RunContext(job, root), warn=lambda line: print(line, file=sys.stderr, flush=True)
            )
        except TrackingError as exc:
            print(exc, file=sys.stderr, flush=True)
            return 2
        metrics = RunMetrics(job.metadata.name)
        port = metrics.serve(wiring.metrics_port, host="0.0.0.0")
        print(f"metrics on :{port}/metrics", flush=True)

        def sink(record: StepRecord) -> None:
            reward = record.figures.reward or 0.0
            figures = " ".join(line_parts(record.figures))
            print(
                f"step {record.step} version {record.version} reward {reward:.3f} {figures}",
                flush=True,
            )
            trackers.log_step(record.figures, record.to_dict())

        evaluations = EvaluationLog(root)  # on the job's storage: kept across restarts
        evaluations.truncate(state.step)

        def evaluated(evaluation: Evaluation) -> None:
            print(evaluation.line(), flush=True)
            evaluations.append(evaluation.to_dict())
            trackers.log_evaluation(evaluation.step, evaluation.tracker_figures())

        try:
            await run_pipeline(
                job,
                session,
                endpoints=Endpoints(
                    proxy_url=wiring.proxy_url,
                    engine_urls=wiring.engine_urls,
                    proxy_token=wiring.proxy_token,
                    weight_sync=weight_sync_wiring(
                        spec, wiring.weight_sync_address, wiring.weight_sync_port, device
                    ),
                ),
                steps=steps,
                metrics=metrics,
                sink=sink,
                evaluated=evaluated,
                earlier_evaluations=evaluations.evaluations(),
                log=lambda line: print(line, flush=True),
                # Engine pods start from the staged base model; a warm start changed it.
                engines_have_initial_weights=spec.model.warm_start is None,
            )
        finally:
            metrics.close()
            trackers.close()
        return 0
    finally:
        shutdown_distributed()
