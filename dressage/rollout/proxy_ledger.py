"""The token ledger's proxy side, step by step: the tokens of turns that never reached a sample.

Only the proxy sees them, in its counter `dressage_proxy_lost_tokens_total{reason, evaluation}`
(a turn the span limit refused, a turn that failed or was cancelled, a preempted turn generated
again without partial rollout). Rank 0's training loop reads every proxy replica's counter once
per step (`ProxyLostTokens.read`: one GET of `/metrics` per replica, all at once, with a short
timeout) and adds what each counted since its previous read to the step's `ledger_tokens`,
under `dressage.rollout.ledger.lost_entry`; the run's end adds only what each counted beyond
its last read (`ProxyLostTokens.remainder`, `dressage.runner.ledger_report`).

Invariants, per replica URL (`counted_since`): counts are taken against the values last read
from that replica; a replica that does not answer keeps them, so what it counted meanwhile
goes to a later step, neither lost nor counted twice; a series below its last value restarted
with its replica (a counter starts again at 0), so all of it is new. Over a run whose replicas
do not restart, the steps' reads plus the end's remainder add up to the counters' final values
(`tests/unit/rollout/test_proxy_ledger.py`).

The first read (`start`, before the first step) only sets the starting values: a trainer that
restarts on a cluster finds its proxies' counters holding what the steps of its previous life
recorded already.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from dressage.metrics import PROXY_LOST_TOKENS
from dressage.proxy.client import ProxyRolloutClient
from dressage.rollout.ledger import lost_entries

LostKey = tuple[str, bool]
"""A series of the proxy's lost-token counter: (its `reason`, whether an evaluation's)."""
LostCounts = dict[LostKey, float]

READ_TIMEOUT_S = 2.0
"""How long a step waits for a replica's `/metrics`; one that takes longer is read next step."""


def parse_lost(text: str) -> LostCounts:
    """The lost-token counter's series in one replica's `/metrics` text (only its lines are
    parsed: a proxy's page holds many histograms). ValueError for a malformed line."""
    lines = [line for line in text.splitlines() if line.startswith(PROXY_LOST_TOKENS)]
    counts: LostCounts = {}
    for family in text_string_to_metric_families("\n".join(lines) + "\n"):
        for sample in family.samples:
            if sample.name == PROXY_LOST_TOKENS:
                key = (sample.labels["reason"], sample.labels.get("evaluation") == "true")
                counts[key] = counts.get(key, 0.0) + sample.value
    return counts


def counted_since(now: Mapping[LostKey, float], before: Mapping[LostKey, float]) -> LostCounts:
    """What one replica counted between two reads, per series: `now - before`, or all of
    `now` for a series below its last value (the replica restarted, its counter with it)."""
    counted: LostCounts = {}
    for key, value in now.items():
        then = before.get(key, 0.0)
        delta = value - then if value >= then else value
        if delta:
            counted[key] = delta
    return counted


def add_counts(into: LostCounts, more: Mapping[LostKey, float]) -> None:
    for key, value in more.items():
        into[key] = into.get(key, 0.0) + value


@dataclass
class ProxyLostTokens:
    """Rank 0's reader of the proxies' lost tokens, one step after another."""

    timeout_s: float = READ_TIMEOUT_S
    last: dict[str, LostCounts] = field(default_factory=dict)
    """Per replica URL, its counter as last read (what the steps' records hold of it)."""
    attributed: Counter[str] = field(default_factory=Counter)
    """The ledger entries handed to the steps' records so far, in all."""

    def advance(self, reads: Mapping[str, Mapping[LostKey, float] | None]) -> LostCounts:
        """What the replicas counted since their last reads, summed (`reads`: each replica's
        counter by URL, None for one that did not answer, whose last values stay); the
        answers become the last values."""
        counted: LostCounts = {}
        for url, now in reads.items():
            if now is None:
                continue
            add_counts(counted, counted_since(now, self.last.get(url, {})))
            self.last[url] = dict(now)
        return counted

    def remainder(self, final: Mapping[str, Mapping[LostKey, float] | None]) -> LostCounts:
        """What the replicas counted beyond their last reads (`final`, read as the run ends;
        None for a replica that did not answer then), the last values unchanged."""
        counted: LostCounts = {}
        for url, now in final.items():
            if now is not None:
                add_counts(counted, counted_since(now, self.last.get(url, {})))
        return counted

    async def _reads(self, proxy: ProxyRolloutClient) -> dict[str, LostCounts | None]:
        texts = await proxy.replica_metrics(self.timeout_s)
        reads: dict[str, LostCounts | None] = {}
        for url, text in texts.items():
            try:
                reads[url] = None if text is None else parse_lost(text)
            except ValueError:  # a page cut short: read again next step
                reads[url] = None
        return reads

    async def start(self, proxy: ProxyRolloutClient) -> None:
        """Take the counters' current values as the start, for replicas not read yet."""
        reads = await self._reads(proxy)
        self.advance({url: now for url, now in reads.items() if url not in self.last})

    async def read(self, proxy: ProxyRolloutClient) -> Counter[str]:
        """The ledger entries of what the proxy replicas counted since their last reads."""
        entries = lost_entries(self.advance(await self._reads(proxy)))
        self.attributed.update(entries)
        return entries
