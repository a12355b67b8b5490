"""One engine's checkpoint load from the proxy (`dressage.proxy.endpoints.weights`): the
request each SGLang release takes, the release read first when the proxy has not read it yet
(as for a pause, whose body depends on it too), and why an engine did not take a version (pure;
the engines are scripted answers at the HTTP boundary)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from dressage.engine.protocol import UpdateWeightsFromDiskRequest
from dressage.proxy.endpoints import control
from dressage.proxy.endpoints.weights import NOT_HELD, load_checkpoint
from dressage.proxy.engine_pool import EnginePool
from dressage.proxy.generation import PauseGate
from dressage.proxy.upstream import Reply

URL = "http://e"
REQUEST = UpdateWeightsFromDiskRequest(model_path="/ckpt/v1", weight_version="v1")


class _Engine:
    """Answers by path (`GET /server_info` 404 where the release predates it); records each
    request as `(method, path, body)`."""

    def __init__(self, release: str, update: dict[str, Any] | None = None) -> None:
        self.release = release
        self.update = update or {"success": True, "message": "ok"}
        self.sent: list[tuple[str, str, Any]] = []

    async def request(self, method: str, url: str, path: str, body: bytes = b"", **_: Any) -> Reply:
        self.sent.append((method, path, orjson.loads(body) if body else None))
        if path == "/server_info" and self.release == "0.5.2":
            return Reply(404, b'{"detail": "Not Found"}')
        if path in ("/server_info", "/get_server_info"):
            return Reply(200, orjson.dumps({"version": self.release}))
        if path == "/update_weights_from_disk":
            return Reply(200, orjson.dumps(self.update))
        return Reply(200, b"{}")


def _state(engine: _Engine, release: str | None = None) -> Any:
    pool = EnginePool([URL])
    pool[URL].release = release
    return SimpleNamespace(pool=pool, connections=engine)


@pytest.mark.parametrize(
    ("release", "expected"),
    [
        (
            "0.5.23",
            [
                ("GET", "/server_info", None),
                (
                    "POST",
                    "/update_weights_from_disk",
                    {"model_path": "/ckpt/v1", "weight_version": "v1", "flush_cache": False},
                ),
                ("POST", "/flush_cache", {}),
            ],
        ),
        (
            "0.5.2",
            [
                ("GET", "/server_info", None),
                ("GET", "/get_server_info", None),
                (
                    "POST",
                    "/update_weights_from_disk",
                    {"model_path": "/ckpt/v1", "weight_version": "v1"},
                ),
            ],
        ),
    ],
)
async def test_a_held_load_reads_an_unknown_release_first_and_flushes_as_it_takes_it(
    release: str, expected: list[tuple[str, str, Any]]
) -> None:
    """Requests held by an `in_place` pause: from 0.5.6 the update keeps the cache and the
    cache is flushed on its own (0.5.23 refuses an update's flush while requests are held);
    before, the update flushes it itself. An engine the proxy has not health-checked yet has
    no release on record: it is asked first, not taken for the oldest."""
    engine = _Engine(release)
    state = _state(engine)
    assert await load_checkpoint(state, URL, REQUEST, True, 60.0) is None
    assert engine.sent == expected
    assert state.pool[URL].release == release


async def test_a_load_under_an_abort_pause_is_one_request_whatever_the_release() -> None:
    engine = _Engine("0.5.23")
    assert await load_checkpoint(_state(engine), URL, REQUEST, False, 60.0) is None
    assert engine.sent == [
        ("POST", "/update_weights_from_disk", {"model_path": "/ckpt/v1", "weight_version": "v1"})
    ]


async def test_an_engine_that_does_not_load_it_says_why_and_is_not_flushed() -> None:
    engine = _Engine("0.5.23", {"success": False, "message": "cannot read the checkpoint"})
    why = await load_checkpoint(_state(engine, "0.5.23"), URL, REQUEST, True, 60.0)
    assert why == "the engine did not load it: cannot read the checkpoint"
    assert [path for _, path, _ in engine.sent] == ["/update_weights_from_disk"]


async def test_an_engine_the_proxy_does_not_hold_is_not_sent_anything() -> None:
    engine = _Engine("0.5.23")
    assert await load_checkpoint(_state(engine), "http://other", REQUEST, True, 60.0) == NOT_HELD
    assert engine.sent == []


async def test_a_pause_asks_an_unknown_release_before_choosing_the_body() -> None:
    """`in_place` goes to a release that has pause modes even before the proxy's first
    health check read it, not the oldest release's `{}` (an abort)."""
    engine = _Engine("0.5.23")
    state = _state(engine)
    state.gate = PauseGate()
    answer = await control.pause(state, None, {"mode": "in_place"})
    assert answer.status == 200
    assert engine.sent == [
        ("GET", "/server_info", None),
        ("POST", "/pause_generation", {"mode": "in_place"}),
    ]
