"""`dressage engine serve`: run the embedded engine (SGLang's HTTP API subset), on CPU by default.

Prints `engine listening on http://HOST:PORT` once the socket accepts connections (with
`--port 0`, the port the OS chose) and `engine ready on http://HOST:PORT` once weights are
loaded; `/health` answers 503 in between. With `--start-unloaded` the engine waits for its first
`/update_weights_from_disk` before it is ready.

`--device cuda` (or `cuda:N`) puts the weights, the KV cache and the forward passes on a GPU;
the default is `cpu`. Sampling runs on the CPU either way, so a seeded request draws the same
tokens from the same logits on both.

`--sglang-release R` picks the SGLang release whose HTTP API the engine serves (its routes,
weight-update protocol, validation answers and answer shapes,
`dressage.engine.embedded.release_profiles`); the
default is the newest tested release, as a cluster installing SGLang today runs.

`--min-step-interval-ms N` emulates a slower accelerator: two decode steps never start less
than N ms apart, so each request gains at most one token per N ms. It bounds generation speed
from above regardless of machine load, which makes tests and demos that act on a generation
while it runs (abort, pause, weight updates, killing the engine) deterministic: N ms x
`max_new_tokens` is a lower bound on how long the generation lasts.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from dressage.engine.embedded.release_profiles import DEFAULT_RELEASE, PROFILES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="engine_command", required=True, metavar="ACTION")
    serve = sub.add_parser("serve", help="serve the SGLang HTTP API subset (CPU or GPU)")
    serve.add_argument("--model", default="builtin:tiny", help="checkpoint dir or builtin:tiny")
    serve.add_argument("--cache-dir", type=Path, default=None, help="where builtin models go")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=30000, help="0 picks a free port")
    serve.add_argument("--seed", type=int, default=0, help="engine sampling seed")
    serve.add_argument("--weight-version", default="default", help="label of the initial weights")
    serve.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    serve.add_argument(
        "--max-batch-size", type=int, default=32, help="running requests per decode step"
    )
    serve.add_argument(
        "--context-length", type=int, default=None, help="max prompt + output tokens"
    )
    serve.add_argument(
        "--max-queued-requests",
        type=int,
        default=None,
        help="requests that may wait for a slot; beyond them HTTP 503 'The request queue is "
        "full.', as SGLang's flag of the same name (default: no limit)",
    )
    serve.add_argument(
        "--start-unloaded",
        action="store_true",
        help="serve without weights (503) until the first /update_weights_from_disk",
    )
    serve.add_argument(
        "--min-step-interval-ms",
        type=float,
        default=0.0,
        metavar="N",
        help="start decode steps at least N ms apart, emulating a slower accelerator for "
        "tests and demos (default 0: no pacing)",
    )
    serve.add_argument(
        "--device",
        default="cpu",
        help="torch device of the weights and forward passes: cpu (default), cuda or cuda:N",
    )
    serve.add_argument(
        "--sglang-release",
        default=DEFAULT_RELEASE,
        choices=sorted(PROFILES),
        help="the SGLang release whose HTTP API to serve: its routes, weight-update protocol, "
        f"validation and answer shapes (default {DEFAULT_RELEASE}, the newest tested)",
    )
    serve.add_argument(
        "--enable-lora",
        action="store_true",
        help="serve LoRA adapters (/load_lora_adapter, /generate lora_path), as SGLang's flag",
    )
    serve.add_argument("--max-lora-rank", type=int, default=None, help="largest adapter rank")
    serve.add_argument(
        "--lora-target-modules", nargs="*", default=None, help="modules adapters may target"
    )
    serve.add_argument(
        "--max-loras-per-batch", type=int, default=8, help="adapters per batch (SGLang's flag)"
    )
    serve.add_argument("--log-level", default="warning")


def run(args: argparse.Namespace) -> int:
    if args.engine_command == "serve":
        return serve(args)
    raise AssertionError(args.engine_command)  # argparse enforces the choices


def serve(args: argparse.Namespace) -> int:
    import torch

    from dressage.engine.embedded.config import LoraServing
    from dressage.engine.embedded.server import EngineConfig, EngineServer
    from dressage.model import resolve_model_source

    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr)
    if args.max_batch_size < 1 or args.threads < 1:
        print("--max-batch-size and --threads must be at least 1", file=sys.stderr)
        return 2
    if args.max_queued_requests is not None and args.max_queued_requests < 0:
        print("--max-queued-requests must be >= 0", file=sys.stderr)
        return 2
    if not args.min_step_interval_ms >= 0:  # also refuses nan
        print("--min-step-interval-ms must be >= 0", file=sys.stderr)
        return 2
    problem = device_problem(args.device)
    if problem is not None:
        print(f"--device: {problem}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    try:
        path = resolve_model_source(args.model, args.cache_dir)
        server = EngineServer(
            EngineConfig(
                model_source=args.model,
                model_path=path,
                cache_dir=args.cache_dir,
                seed=args.seed,
                weight_version=args.weight_version,
                max_batch_size=args.max_batch_size,
                context_length=args.context_length,
                start_unloaded=args.start_unloaded,
                min_step_interval_ms=args.min_step_interval_ms,
                max_queued_requests=args.max_queued_requests,
                device=args.device,
                sglang_release=args.sglang_release,
                lora=(
                    LoraServing(
                        max_lora_rank=args.max_lora_rank,
                        target_modules=(
                            None
                            if args.lora_target_modules is None
                            else tuple(args.lora_target_modules)
                        ),
                        max_loras_per_batch=args.max_loras_per_batch,
                    )
                    if args.enable_lora
                    else None
                ),
            )
        )
    except (ValueError, OSError) as exc:
        print(f"cannot serve --model {args.model}: {exc}", file=sys.stderr)
        return 2
    return _run(_serve(server, args.host, args.port, args.log_level))


def device_problem(device: str) -> str | None:
    """Why this process cannot compute on `device` (`cpu`, `cuda`, `cuda:N`), or None."""
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError):
        return f"{device!r} is not a torch device (cpu, cuda or cuda:N)"
    if parsed.type == "cpu":
        return None
    if parsed.type != "cuda":
        return f"{device!r}: only cpu and cuda devices are supported"
    if not torch.cuda.is_available():
        return f"{device!r} asked for but torch sees no CUDA device"
    if parsed.index is not None and parsed.index >= torch.cuda.device_count():
        return f"{device!r}: torch sees {torch.cuda.device_count()} CUDA device(s)"
    return None


def _run(main: Coroutine[Any, Any, int]) -> int:
    """Run `main` on uvloop when it is installed (as the proxy does), else on asyncio's loop.

    uvloop's loop costs the HTTP side less CPU per request, which the forward passes get.
    """
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


async def _serve(server: object, host: str, port: int, log_level: str) -> int:
    import uvicorn

    from dressage.engine.embedded.server import EngineServer
    from dressage.serving import http_protocol

    assert isinstance(server, EngineServer)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    bound_port = sock.getsockname()[1]
    url = (
        f"http://[{host}]:{bound_port}"
        if family == socket.AF_INET6
        else f"http://{host}:{bound_port}"
    )
    config = uvicorn.Config(
        server.app,
        http=http_protocol(),
        log_level=log_level,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=3,
        # Longer than any client's idle expiry, so a client never writes into a connection
        # the server is closing.
        timeout_keep_alive=60,
    )
    started = asyncio.Event()

    class _Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            started.set()

    uv = _Server(config)

    def fatal() -> None:
        uv.should_exit = True

    server.on_fatal = fatal

    async def announce() -> None:
        await started.wait()
        print(f"engine listening on {url}", flush=True)
        await server.wait_loaded()
        print(f"engine ready on {url}", flush=True)

    announcer = asyncio.create_task(announce())
    try:
        await uv.serve(sockets=[sock])
    finally:
        announcer.cancel()
    if server.fatal_error:
        print(server.fatal_error, file=sys.stderr)
        return 1
    return 0
