"""Engine pool: sticky, least-loaded, health (pure)."""

from __future__ import annotations

import pytest

from dressage.proxy.errors import ProxyError
from dressage.proxy.routing import EnginePool


def test_least_loaded_then_sticky_while_healthy() -> None:
    pool = EnginePool(["http://a", "http://b"])
    pool["http://a"].inflight = 3
    assert pool.pick().url == "http://b"
    assert pool.pick("http://a").url == "http://a"
    pool.mark_down("http://a", "connection refused")
    assert pool.pick("http://a").url == "http://b"
    assert pool.pick(exclude=frozenset({"http://a"})).url == "http://b"


def test_no_healthy_engine_is_a_503_naming_each_engine() -> None:
    pool = EnginePool(["http://a"])
    pool.mark_down("http://a", "refused")
    with pytest.raises(ProxyError) as info:
        pool.pick()
    assert info.value.status == 503
    assert info.value.name == "no_healthy_engine"
    assert info.value.detail == {"engines": {"http://a": "refused"}}
    pool.mark_up("http://a")
    assert pool.pick().url == "http://a"
