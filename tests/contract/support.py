"""Shared pieces of the contract tier: SGLang's own code at the installed release, and a
recording fake SGLang server on loopback that answers in the shapes that release produces.

Shapes (read in SGLang v0.5.2, `python/sglang/srt/`):
- `entrypoints/http_server.py`: `/generate` returns the TokenizerManager's output dict;
  `/update_weights_from_disk` `{"success", "message", "num_paused_requests"}`;
  `/pause_generation` and `/continue_generation` `{"message": ..., "status": "ok"}`;
  `/abort_request` an empty 200; `/get_weight_version` `{"weight_version"}`;
  `/get_server_info` the server args plus `"version"`.
- `managers/tokenizer_manager.py` `_handle_batch_output`: `meta_info` has `id`,
  `finish_reason` (`FINISH_*.to_json()`, `managers/schedule_batch.py`), `prompt_tokens`,
  `weight_version`, `completion_tokens`, `cached_tokens`, `e2e_latency`, and with
  `return_logprob` `output_token_logprobs` as `(logprob, token_id, text_or_None)` tuples;
  `_handle_abort_req`: an abort before prefill is `{"text": "", "meta_info": {"id",
  "finish_reason": {"type": "abort", "message": "Abort before prefill"}, "prompt_tokens": 0,
  "completion_tokens": 0}}` (no `output_ids`), and an abort carrying the scheduler's reason is
  `{"meta_info": {"id", "finish_reason"}}` only.
"""

from __future__ import annotations

import ast
import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

sglang = pytest.importorskip(
    "sglang", reason="SGLang is not importable: the tier runs per release, sglang-compat.sh"
)

from dressage.engine.sglang_support import SGLANG_PINNED_VERSION  # noqa: E402

SGLANG_VERSION = metadata.version("sglang")
"""The release this run of the tier imports: one of the matrix
(`dressage.api.sglang.SGLANG_TESTED_RELEASES`), or one being tried (`scripts/sglang-compat.sh`)."""


def http_server_source() -> str:
    """The text of SGLang's `entrypoints/http_server.py` (read, not imported: importing it
    starts uvloop and needs the GPU stack)."""
    root = Path(sglang.__file__).parent
    return (root / "srt" / "entrypoints" / "http_server.py").read_text()


def sglang_routes() -> set[tuple[str, str]]:
    """Every `(method, path)` SGLang's HTTP server routes."""
    import re

    routes: set[tuple[str, str]] = set()
    for match in re.finditer(
        r'@app\.(get|post|put|api_route)\(\s*"([^"]+)"(?:,\s*methods=\[([^\]]*)\])?',
        http_server_source(),
    ):
        kind, path, methods = match.groups()
        if kind == "api_route":
            for m in re.findall(r'"(\w+)"', methods or ""):
                routes.add((m.upper(), path))
        else:
            routes.add((kind.upper(), path))
    return routes


def route_handler(method: str, path: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    """The function of SGLang's `http_server.py` that serves `method path` (decorated with
    `@app.get(path)`, `@app.post(path)` or `@app.api_route(path, methods=[...])`)."""
    for node in ast.walk(ast.parse(http_server_source())):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for deco in node.decorator_list:
            if not (
                isinstance(deco, ast.Call)
                and isinstance(deco.func, ast.Attribute)
                and isinstance(deco.func.value, ast.Name)
                and deco.func.value.id == "app"
                and deco.args
                and isinstance(deco.args[0], ast.Constant)
                and deco.args[0].value == path
            ):
                continue
            kind = deco.func.attr
            if kind == "api_route":
                methods = next((k.value for k in deco.keywords if k.arg == "methods"), None)
                elts = getattr(methods, "elts", [])
                names = {str(e.value).upper() for e in elts if isinstance(e, ast.Constant)}
                if method.upper() in names:
                    return node
            elif kind.upper() == method.upper():
                return node
    raise LookupError(f"SGLang {SGLANG_VERSION} serves no {method} {path}")


def handler_logs(handler: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """The `logger.<level>(...)` calls in a route handler's body."""
    return [
        ast.unparse(call.func)
        for call in ast.walk(handler)
        if isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id == "logger"
    ]


def handler_awaits(handler: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """What a route handler awaits (a round trip to the scheduler is awaited; a handler that
    awaits nothing answers from the HTTP process alone)."""
    return [ast.unparse(node.value) for node in ast.walk(handler) if isinstance(node, ast.Await)]


def finish_stop(matched: int | str = 2) -> dict[str, Any]:
    return {"type": "stop", "matched": matched}


def finish_length(n: int) -> dict[str, Any]:
    return {"type": "length", "length": n}


def finish_abort(message: str = "Abort in waiting queue") -> dict[str, Any]:
    return {"type": "abort", "message": message}


def generate_answer(
    body: dict[str, Any],
    output_ids: list[int],
    finish_reason: dict[str, Any] | None,
    *,
    version: str = "default",
) -> dict[str, Any]:
    """A finished `/generate` answer as SGLang v0.5.2 builds it for `body`."""
    meta: dict[str, Any] = {
        "id": body.get("rid") or "0123456789abcdef",
        "finish_reason": finish_reason,
        "prompt_tokens": len(body.get("input_ids") or []),
        "weight_version": version,
        "completion_tokens": len(output_ids),
        "cached_tokens": 0,
        "e2e_latency": 0.01,
    }
    if body.get("return_logprob"):
        with_text = bool(body.get("return_text_in_logprobs"))
        meta["output_token_logprobs"] = [
            [-0.5, t, f"t{t}" if with_text else None] for t in output_ids
        ]
    return {
        "text": "".join(f"t{t}" for t in output_ids),
        "output_ids": output_ids,
        "meta_info": meta,
    }


ABORT_BEFORE_PREFILL = {
    "text": "",
    "meta_info": {
        "id": "0123456789abcdef",
        "finish_reason": {"type": "abort", "message": "Abort before prefill"},
        "prompt_tokens": 0,
        "completion_tokens": 0,
    },
}
QUEUE_FULL_ERROR = {
    "object": "error",
    "message": "The request queue is full.",
    "type": "503",
    "code": 503,
}
"""The HTTP 503 body of a request the scheduler refused (`FINISH_ABORT` with status 503 turned
into `HTTPException` by the TokenizerManager, rendered by http_server's exception handler)."""


def finish_abort_running(message: str = "Aborted by AbortReq.") -> dict[str, Any]:
    """`FINISH_ABORT(message).to_json()` of a running request aborted by `/abort_request`."""
    return {"type": "abort", "message": message, "status_code": None, "err_type": None}


@dataclass
class Recorded:
    method: str
    path: str
    body: Any


@dataclass
class FakeSGLang:
    """A loopback HTTP server answering as SGLang `version` does; records every request.

    `answers` holds scripted `/generate` answers, `(status, body)` pairs used in order. When
    it is empty, a `/generate` is judged by SGLang's own classes (`check_generate_body`): a
    `TypeError` answers 500 `Internal Server Error` (v0.5.2 `http_server.py` catches only
    `ValueError`), a `ValueError` 400 `{"error": {"message"}}`, and an accepted body three
    tokens finished by length.
    """

    version: str = SGLANG_VERSION
    requests: list[Recorded] = field(default_factory=list)
    answers: list[tuple[int, Any]] = field(default_factory=list)
    url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)
    routes: set[tuple[str, str]] = field(default_factory=lambda: sglang_routes())
    """What the fake serves: the installed release's routes (anything else is 404)."""
    session: bool = False
    """A weight-update session is open (releases with `/begin_weight_update`)."""

    def posted(self, path: str) -> list[Any]:
        with self.lock:
            return [r.body for r in self.requests if r.method == "POST" and r.path == path]

    def answer(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        if (method, path) not in self.routes:
            return 404, {"detail": "Not Found"}
        sessions = ("POST", "/begin_weight_update") in self.routes
        if path in ("/begin_weight_update", "/end_weight_update"):
            opening = path == "/begin_weight_update"
            if self.session is opening:
                return 400, {"success": False, "message": "session already open or not open"}
            self.session = opening
            return 200, {"success": True, "message": "Success"}
        if path == "/update_weights_from_distributed" and sessions and not self.session:
            # 0.5.23 `SchedulerWeightUpdaterManager.update_weights_from_distributed`.
            return 400, {
                "success": False,
                "message": "update_weights_from_distributed must run between "
                "begin_weight_update() and end_weight_update()",
            }
        if path == "/generate":
            with self.lock:
                scripted = self.answers.pop(0) if self.answers else None
            if scripted is not None:
                return scripted
            try:
                check_generate_body(body)
            except TypeError:
                return 500, b"Internal Server Error"
            except ValueError as exc:
                return 400, {"error": {"message": str(exc)}}
            return 200, generate_answer(body, [5, 6, 7], finish_length(3))
        fixed: dict[str, tuple[int, Any]] = {
            "/update_weights_from_disk": (
                200,
                {
                    "success": True,
                    "message": "Succeeded to update model weights.",
                    "num_paused_requests": 0,
                },
            ),
            "/pause_generation": (
                200,
                {"message": "Generation paused successfully.", "status": "ok"},
            ),
            "/continue_generation": (
                200,
                {"message": "Generation continued successfully.", "status": "ok"},
            ),
            "/abort_request": (200, None),
            "/get_weight_version": (200, {"weight_version": "default"}),
            "/get_server_info": (
                200,
                {"model_path": "m", "weight_version": "default", "version": self.version},
            ),
            "/server_info": (200, {"model_path": "m", "version": self.version}),
            "/init_weights_update_group": (200, {"success": True, "message": "Succeeded."}),
            "/update_weights_from_distributed": (200, {"success": True, "message": "Succeeded."}),
            "/destroy_weights_update_group": (200, {"success": True, "message": "Succeeded."}),
            "/flush_cache": (200, b"Cache flushed."),
            "/model_info": (
                200,
                {"model_path": "m", "is_generation": True, "weight_version": "default"},
            ),
            "/get_model_info": (
                200,
                {
                    "model_path": "m",
                    "tokenizer_path": "m",
                    "is_generation": True,
                    "preferred_sampling_params": None,
                    "weight_version": "default",
                },
            ),
            "/health": (200, None),
            "/health_generate": (200, None),
        }
        return fixed.get(path, (404, {"detail": "Not Found"}))


@contextmanager
def fake_sglang(version: str = SGLANG_VERSION) -> Iterator[FakeSGLang]:
    """Serve a `FakeSGLang` on a free loopback port for the duration of the block."""
    fake = FakeSGLang(version=version)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw.strip() else None
            path = self.path.split("?", 1)[0]
            with fake.lock:
                fake.requests.append(Recorded(self.command, path, body))
            status, data = fake.answer(self.command, path, body)
            if isinstance(data, bytes):
                payload, kind = data, "text/plain; charset=utf-8"
            else:
                payload = b"" if data is None else json.dumps(data).encode()
                kind = "application/json"
            self.send_response(status)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = _serve
        do_POST = _serve

        def log_message(self, format: str, *args: Any) -> None:
            return

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: Any, client_address: Any) -> None:
            # A client that hangs up before reading the answer (a proxy shutting down, a
            # pooled connection dropped) is not the fake's failure; anything else is printed.
            if not isinstance(sys.exc_info()[1], ConnectionError):
                super().handle_error(request, client_address)

    server = Server(("127.0.0.1", 0), Handler)
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class ServerTokenizer:
    """What `SamplingParams.normalize(tokenizer)` uses of the server's tokenizer (`encode`).

    The engines Dressage starts load their tokenizer (no `--skip-tokenizer-init`), so
    `normalize` gets one; with None it takes the server for a `--skip-tokenizer-init` one,
    which 0.5.23 refuses stop strings for ("stop=[...] is unavailable when
    skip_tokenizer_init=True")."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(text.encode())


def check_generate_body(body: dict[str, Any]) -> None:
    """SGLang accepts `body` on `/generate`: where the release has one, its API schema gate
    passes it (0.5.23 `api_contract.generate_contract_error`); `GenerateReqInput(**body)`
    normalizes, and its `sampling_params` build a `SamplingParams` that normalizes (with the
    server's tokenizer) and verifies (the steps of `TokenizerManager._create_tokenized_object`,
    0.5.2 and 0.5.23). Raises what the release raises: `TypeError` (HTTP 500 on 0.5.2) or
    `ValueError` (HTTP 400)."""
    from sglang.srt.managers.io_struct import GenerateReqInput
    from sglang.srt.sampling.sampling_params import SamplingParams

    gate = schema_gate()
    if gate is not None:
        error = gate(body)
        if error is not None:
            raise ValueError(error)
    req = GenerateReqInput(**body)
    req.normalize_batch_and_arguments()
    params = SamplingParams(**(body.get("sampling_params") or {}))
    params.normalize(ServerTokenizer())
    params.verify(vocab_size=1 << 16)


def schema_gate() -> Any:
    """The release's `/generate` schema gate (`generate_contract_error(body) -> str | None`,
    0.5.23), None for a release without one."""
    try:
        from sglang.srt.entrypoints.api_contract import generate_contract_error
    except ImportError:
        return None
    return generate_contract_error


__all__ = ["SGLANG_PINNED_VERSION", "SGLANG_VERSION"]
