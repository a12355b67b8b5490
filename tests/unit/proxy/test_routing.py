"""Engine pool: sticky, least-loaded, health, weight versions, membership (pure)."""

from __future__ import annotations

import pytest

from dressage.proxy.engine_pool import EnginePool
from dressage.proxy.errors import ProxyError


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


def test_once_a_version_is_current_only_engines_serving_it_are_routed_to() -> None:
    pool = EnginePool(["http://a", "http://b"])
    pool["http://a"].weight_version = "v2"
    pool["http://b"].weight_version = "v1"
    pool["http://a"].inflight = 5
    assert pool.pick().url == "http://b"  # no version stated yet: every healthy engine
    pool.target_version = "v2"
    assert pool.pick("http://b").url == "http://a"  # a lagging engine loses its sessions
    pool["http://a"].weight_version = "v1"
    with pytest.raises(ProxyError) as info:
        pool.pick()
    assert info.value.status == 503
    assert "v2" in info.value.message
    assert info.value.detail == {
        "engines": {
            "http://a": "serves weight version v1, not the current v2",
            "http://b": "serves weight version v1, not the current v2",
        }
    }


def test_engines_join_unchecked_and_leave_at_once() -> None:
    pool = EnginePool(["http://a", "http://b"])
    leaving = pool["http://b"]
    assert pool.set_urls(["http://b", "http://c"]) == (["http://c"], ["http://a"])
    assert pool.urls == ["http://b", "http://c"]
    assert pool["http://b"] is leaving  # kept engines keep their state
    assert (pool["http://c"].healthy, pool["http://c"].last_error) == (False, "not checked yet")
    assert pool.pick().url == "http://b"
    pool.mark_down("http://a", "refused")  # a request on a removed engine failing: ignored
    assert pool.get("http://a") is None
