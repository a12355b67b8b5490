"""`dressage proxy`: run the rollout proxy.

Flags derive from `ProxyConfig` (one flag per field, its docstring as help); the design's
names are kept (`docs/staleness.md`): `--dressage-partial-rollout`, `--record-token-versions`,
`--max-partial-rollout-preempts`. `--config JOB.yaml` (or `$DRESSAGE_JOB_CONFIG`) takes
defaults from an `AsyncRLJob`; explicit flags win. Once listening it prints
`proxy ready on http://HOST:PORT` (with the real port when `--port 0`).
"""

from __future__ import annotations

import argparse
import gc
import os
import socket
import sys
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from dressage.api.proxy_settings import proxy_settings
from dressage.proxy.config import ProxyConfig

_FLAG_NAMES = {"partial_rollout": "--dressage-partial-rollout"}
_TOKEN_ENV = "DRESSAGE_PROXY_TOKEN"
JOB_CONFIG_ENV = "DRESSAGE_JOB_CONFIG"
GC_YOUNG_THRESHOLD = 20_000
"""Allocations between collections of the youngest generation (Python's default is 700)."""
ENV_VARS = (JOB_CONFIG_ENV, _TOKEN_ENV)
"""Every variable `dressage proxy` reads (`--config`'s fallback and the bearer token)."""


def _flag(field: str) -> str:
    return _FLAG_NAMES.get(field, "--" + field.replace("_", "-"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="JOB.yaml",
        help=f"take defaults from an AsyncRLJob manifest (${JOB_CONFIG_ENV})",
    )
    for name, info in ProxyConfig.model_fields.items():
        flag = _flag(name)
        help_text = (info.description or "").replace("%", "%%")
        if name == "engine_urls":
            parser.add_argument(
                flag,
                dest=name,
                action="append",
                metavar="URL[,URL...]",
                help=help_text + " Repeatable, or a comma-separated list.",
            )
        elif info.annotation is bool:
            parser.add_argument(flag, dest=name, action="store_true", default=None, help=help_text)
        else:
            kind: Any = str
            if "int" in str(info.annotation):
                kind = int
            elif "float" in str(info.annotation):
                kind = float
            parser.add_argument(flag, dest=name, type=kind, default=None, help=help_text)


def build_config(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> ProxyConfig:
    """The config from `--config` (or `$DRESSAGE_JOB_CONFIG`) defaults, the environment
    (`os.environ` unless given) and explicit flags."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    config_path = args.config or environ.get(JOB_CONFIG_ENV)
    if config_path:
        from dressage.api import load_job

        values.update(proxy_settings(load_job(config_path)))
    token = environ.get(_TOKEN_ENV)
    if token:
        values["auth_token"] = token
    for name in ProxyConfig.model_fields:
        value = getattr(args, name, None)
        if value is None:
            continue
        if name == "engine_urls":
            value = [u for item in value for u in item.split(",") if u.strip()]
        values[name] = value
    return ProxyConfig(**values)


def run(args: argparse.Namespace) -> int:
    try:
        config = build_config(args)
    except ValidationError as exc:
        for error in exc.errors():
            field = ".".join(str(p) for p in error["loc"])
            flag = _flag(field) if field in ProxyConfig.model_fields else field or "config"
            print(f"dressage proxy: {flag}: {error['msg']}", file=sys.stderr)
        return 2
    except ValueError as exc:  # a bad --config manifest
        print(f"dressage proxy: {exc}", file=sys.stderr)
        return 2
    from dressage.proxy.app import initial_engine_urls

    try:
        initial_engine_urls(config)
    except ValueError as exc:  # an engine URLs file that cannot be read
        print(f"dressage proxy: {exc}", file=sys.stderr)
        return 2
    serve(config)
    return 0


def serve(config: ProxyConfig) -> None:
    """Serve the proxy until interrupted (uvicorn with uvloop/httptools when installed)."""
    import uvicorn

    from dressage.proxy.app import create_app
    from dressage.serving import http_protocol

    app = create_app(config)
    # Every request allocates hundreds of short-lived objects while the heap is mostly
    # long-lived (modules, the tokenizer, open sessions). With the default thresholds the
    # cyclic collector takes about a quarter of the proxy's CPU per request; startup objects
    # are frozen out of collections, and a larger young generation lets a request's objects
    # die by reference counting before a collection visits them.
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    sock = socket.socket(socket.AF_INET6 if ":" in config.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((config.host, config.port))
    host, port = sock.getsockname()[:2]

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                shown = f"[{host}]" if ":" in host else host
                print(f"proxy ready on http://{shown}:{port}", flush=True)

    uv_config = uvicorn.Config(
        app,
        loop=_available("uvloop", "auto"),
        http=http_protocol(),
        log_level="warning",
        access_log=False,
        proxy_headers=False,  # client addresses are never used: skip X-Forwarded-* parsing
        backlog=4096,
        timeout_keep_alive=60,
    )
    Server(uv_config).run(sockets=[sock])


def _available(module: str, fallback: str) -> str:
    import importlib.util

    return module if importlib.util.find_spec(module) is not None else fallback
