"""Every route `dressage.engine.wire` names is one the release's HTTP server routes
(`python/sglang/srt/entrypoints/http_server.py`, read from the release's own source), and the
routes that arrived later are routed exactly from the release `sglang_support` names."""

from __future__ import annotations

from dressage.engine import wire
from dressage.engine.sglang_support import (
    DESTROY_WEIGHTS_UPDATE_GROUP,
    WEIGHT_UPDATE_SESSIONS,
    Feature,
    supports,
)
from tests.contract.support import SGLANG_VERSION, sglang_routes

LATER: dict[str, Feature] = {
    wire.DESTROY_WEIGHTS_UPDATE_GROUP: DESTROY_WEIGHTS_UPDATE_GROUP,
    wire.BEGIN_WEIGHT_UPDATE: WEIGHT_UPDATE_SESSIONS,
    wire.END_WEIGHT_UPDATE: WEIGHT_UPDATE_SESSIONS,
}


def _wire_routes() -> list[str]:
    return [
        value
        for name, value in vars(wire).items()
        if name.isupper() and isinstance(value, str) and value.startswith("/")
    ]


def test_every_wire_route_is_routed_from_the_release_that_has_it() -> None:
    routed = {path for _, path in sglang_routes()}
    assert _wire_routes()
    for path in _wire_routes():
        feature = LATER.get(path)
        expected = feature is None or supports(SGLANG_VERSION, feature)
        assert (path in routed) is expected, (path, SGLANG_VERSION)
