"""The token ledger's proxy side per step (`dressage.rollout.proxy_ledger`): what each proxy
replica counted since its last read, one entry per (reason, evaluation) as the run's end
counts them, and nothing lost or counted twice when a replica misses a read."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import generate_latest

from dressage.proxy.errors import PARTIAL_ROLLOUT_STALENESS_EXCEEDED
from dressage.proxy.metrics import ProxyMetrics
from dressage.rollout.ledger import lost_entries, lost_entry
from dressage.rollout.proxy_ledger import (
    LostCounts,
    LostKey,
    ProxyLostTokens,
    counted_since,
    parse_lost,
)
from dressage.runner.ledger_report import run_ledger

REFUSED = (PARTIAL_ROLLOUT_STALENESS_EXCEEDED, False)


def test_each_lost_series_has_one_entry_shared_with_the_runs_end() -> None:
    assert lost_entry(PARTIAL_ROLLOUT_STALENESS_EXCEEDED, False) == (
        f"refused.{PARTIAL_ROLLOUT_STALENESS_EXCEEDED}"
    )
    assert lost_entry("restarted", False) == "aborted.restarted"
    assert lost_entry("cancelled", False) == "aborted.cancelled"
    assert lost_entry(PARTIAL_ROLLOUT_STALENESS_EXCEEDED, True) == "evaluation"
    lost = {REFUSED: 7.0, ("restarted", False): 3.0, ("cancelled", True): 2.0}
    # The end's ledger maps the proxy's tokens through the same function.
    assert run_ledger({}, lost, None)["entries"] == dict(lost_entries(lost))


def _page(counts: LostCounts) -> str:
    metrics = ProxyMetrics(active_sessions=lambda: 0.0)
    for (reason, evaluation), tokens in counts.items():
        metrics.lost_tokens.labels(reason, "true" if evaluation else "false").inc(tokens)
    return generate_latest(metrics.registry).decode()


def test_the_lost_series_are_read_from_the_proxys_own_page() -> None:
    counts = {REFUSED: 5.0, ("restarted", False): 2.0, ("cancelled", True): 1.0}
    assert parse_lost(_page(counts)) == counts
    assert parse_lost(_page({})) == {}


def test_a_series_below_its_last_read_restarted_with_its_replica() -> None:
    assert counted_since({REFUSED: 9.0}, {REFUSED: 4.0}) == {REFUSED: 5.0}
    assert counted_since({REFUSED: 3.0}, {REFUSED: 4.0}) == {REFUSED: 3.0}
    assert counted_since({REFUSED: 4.0}, {REFUSED: 4.0}) == {}


def test_a_replica_that_misses_a_read_gives_its_tokens_to_the_next() -> None:
    reader = ProxyLostTokens()
    a, b = "http://a", "http://b"
    assert reader.advance({a: {REFUSED: 2.0}, b: {REFUSED: 1.0}}) == {REFUSED: 3.0}
    assert reader.advance({a: {REFUSED: 5.0}, b: None}) == {REFUSED: 3.0}
    assert reader.last[b] == {REFUSED: 1.0}
    assert reader.advance({a: {REFUSED: 5.0}, b: {REFUSED: 4.0}}) == {REFUSED: 3.0}
    assert reader.remainder({a: {REFUSED: 6.0}, b: None}) == {REFUSED: 1.0}
    assert reader.last == {a: {REFUSED: 5.0}, b: {REFUSED: 4.0}}


KEYS = st.sampled_from(
    [REFUSED, ("restarted", False), ("engine_failed", False), (REFUSED[0], True)]
)


@given(
    st.lists(  # per read: per replica, the tokens it counted since the previous read, or None
        st.lists(
            st.one_of(st.none(), st.dictionaries(KEYS, st.integers(0, 50), max_size=3)),
            min_size=3,
            max_size=3,
        ),
        max_size=12,
    ),
    st.lists(st.dictionaries(KEYS, st.integers(0, 50), max_size=3), min_size=3, max_size=3),
)
def test_the_steps_reads_and_the_ends_remainder_add_up_to_the_counters(
    steps: list[list[dict[LostKey, int] | None]], tail: list[dict[LostKey, int]]
) -> None:
    urls = ["http://r0", "http://r1", "http://r2"]
    counters: dict[str, dict[LostKey, float]] = {url: {} for url in urls}
    reader = ProxyLostTokens()
    read: dict[LostKey, float] = {}

    def grow(url: str, more: dict[LostKey, int]) -> None:
        for key, n in more.items():
            counters[url][key] = counters[url].get(key, 0.0) + n

    for step in steps:
        answers: dict[str, dict[LostKey, float] | None] = {}
        for url, more in zip(urls, step, strict=True):
            # A replica that misses a read counts all the same.
            grow(url, more or {})
            answers[url] = None if more is None else dict(counters[url])
        for key, n in reader.advance(answers).items():
            read[key] = read.get(key, 0.0) + n
    for url, more in zip(urls, tail, strict=True):
        grow(url, more)
    remainder = reader.remainder({url: dict(counters[url]) for url in urls})
    final: dict[LostKey, float] = {}
    for counts in counters.values():
        for key, n in counts.items():
            final[key] = final.get(key, 0.0) + n
    summed = {k: read.get(k, 0.0) + remainder.get(k, 0.0) for k in set(read) | set(remainder)}
    assert {k: v for k, v in summed.items() if v} == {k: v for k, v in final.items() if v}
