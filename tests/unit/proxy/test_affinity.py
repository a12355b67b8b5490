"""Rendezvous hashing of prompt groups onto proxy replicas, and the replica sources."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dressage.proxy.affinity import (
    dns_target,
    parse_replica_urls,
    replica_for,
    replica_urls_of,
    shard_of,
)

replica_sets = st.lists(
    st.integers(min_value=1, max_value=65535).map(lambda p: f"http://10.0.0.1:{p}"),
    min_size=1,
    max_size=8,
    unique=True,
)
keys = st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=40, unique=True)


@given(replica_sets, keys)
def test_a_group_always_hashes_to_the_same_replica_whatever_the_order(
    replicas: list[str], groups: list[str]
) -> None:
    for group in groups:
        chosen = replica_for(group, replicas)
        assert chosen in replicas
        assert replica_for(group, list(reversed(replicas))) == chosen


@given(replica_sets.filter(lambda r: len(r) > 1), keys, st.data())
def test_removing_a_replica_moves_only_the_groups_it_held(
    replicas: list[str], groups: list[str], data: st.DataObject
) -> None:
    gone = data.draw(st.sampled_from(replicas))
    left = [r for r in replicas if r != gone]
    for group in groups:
        before = replica_for(group, replicas)
        after = replica_for(group, left)
        if before != gone:
            assert after == before


@given(replica_sets, keys, st.integers(min_value=1, max_value=65535))
def test_adding_a_replica_takes_groups_only_onto_itself(
    replicas: list[str], groups: list[str], port: int
) -> None:
    new = f"http://10.0.0.2:{port}"
    for group in groups:
        after = replica_for(group, [*replicas, new])
        assert after in (replica_for(group, replicas), new)


def test_groups_spread_over_the_replicas() -> None:
    replicas = ["http://a:8000", "http://b:8000", "http://c:8000"]
    counts = {r: 0 for r in replicas}
    for i in range(3000):
        counts[replica_for(f"run-p{i}-a0", replicas)] += 1
    assert all(800 < n < 1200 for n in counts.values()), counts


@given(
    st.lists(st.integers(1, 65535), min_size=1, max_size=40, unique=True),
    st.integers(min_value=1, max_value=8),
)
def test_every_engine_is_in_one_shard_whoever_computes_it(ports: list[int], count: int) -> None:
    urls = [f"http://10.1.0.1:{p}" for p in ports]
    shards = [shard_of(url, count) for url in urls]
    assert all(0 <= shard < count for shard in shards)
    # The URL alone decides: a trailing slash, another list or another order change nothing.
    assert [shard_of(url + "/", count) for url in reversed(urls)] == shards[::-1]
    assert all(shard_of(url, 1) == 0 for url in urls)


def test_a_thousand_engines_split_evenly_over_four_shards() -> None:
    counts = [0] * 4
    for i in range(1024):
        counts[shard_of(f"http://10.{i // 250}.{i % 250}.7:30000", 4)] += 1
    assert all(220 < n < 292 for n in counts), counts  # within 15 % of 256
    with pytest.raises(ValueError, match="shard count"):
        shard_of("http://e:1", 0)


def test_no_replica_is_an_error() -> None:
    with pytest.raises(ValueError, match="no proxy replica"):
        replica_for("g", [])


def test_replica_lists_parse_and_bad_ones_are_named() -> None:
    assert parse_replica_urls("http://a:1/, http://b:2") == ("http://a:1", "http://b:2")
    assert parse_replica_urls(["http://a:1"]) == ("http://a:1",)
    with pytest.raises(ValueError, match="no proxy URL"):
        parse_replica_urls(" , ")
    with pytest.raises(ValueError, match="'a:1' is not an http"):
        parse_replica_urls("a:1")
    with pytest.raises(ValueError, match="http://a:1 is named twice"):
        parse_replica_urls("http://a:1,http://a:1/")


def test_a_dns_source_names_host_and_port_and_resolves_to_sorted_urls() -> None:
    assert dns_target("http://a:1") is None
    assert dns_target("dns+http://job-proxy-replicas.ns.svc:8000") == (
        "http",
        "job-proxy-replicas.ns.svc",
        8000,
    )
    for bad in ("dns+ftp://h:1", "dns+http://h", "dns+http://h:x", "dns+http://h:1/p"):
        with pytest.raises(ValueError, match="dns"):
            dns_target(bad)
    assert replica_urls_of("http", ["10.0.0.2", "10.0.0.1", "10.0.0.2", "fd00::1"], 80) == (
        "http://10.0.0.1:80",
        "http://10.0.0.2:80",
        "http://[fd00::1]:80",
    )
