"""The token ledger: every generated token in exactly one account, adding up to what was generated.

The pure module's entries are checked on arbitrary counts; the collector's on arbitrary runs of
a rollout function that stands in for the engines and counts every token it hands out (the
tokens of completed groups, and of failed attempts' finished trajectories), so "adds up" is
checked against the generating side, as the integration test does against a real engine's
`generation_tokens_total`.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dressage.api.figures import LEDGER_ACCOUNTS, figure
from dressage.data.groups import Group, GroupFailed
from dressage.data.samples import Sample
from dressage.proxy.errors import PARTIAL_ROLLOUT_STALENESS_EXCEEDED
from dressage.rollout import ledger
from dressage.rollout.collector import AsyncRolloutCollector, CollectorClosed
from dressage.rollout.ledger import Account
from dressage.rollout.retry import RetryPolicy
from dressage.rollout.staleness import StalenessConfig
from dressage.rollout.sync_rollout import SyncCollector

entries = st.tuples(
    st.sampled_from(list(Account)),
    st.one_of(st.none(), st.sampled_from(["stale_version", "window_advanced", "pending"])),
    st.integers(min_value=0, max_value=1000),
)


@given(st.lists(entries, max_size=40))
def test_accounts_are_disjoint_and_sum_to_the_total(counts: list) -> None:  # type: ignore[type-arg]
    book: Counter[str] = Counter()
    for account, reason, tokens in counts:
        ledger.count(book, account, tokens, reason)
    per_account = ledger.accounts(book)
    assert list(per_account) == list(LEDGER_ACCOUNTS)
    # Each entry belongs to exactly one account, so the accounts partition the entries.
    for key in book:
        assert sum(ledger.account_of(key) is a for a in Account) == 1
    assert sum(per_account.values()) == ledger.total(book) == sum(t for _, _, t in counts)
    for account in Account:
        assert per_account[account.value] == sum(t for a, _, t in counts if a is account)


def test_the_declared_accounts_are_the_ledgers() -> None:
    assert tuple(a.value for a in Account) == LEDGER_ACCOUNTS
    assert figure("ledger_tokens").metric == "dressage_ledger_tokens_total"


def test_an_entry_of_no_account_is_a_one_line_error() -> None:
    with pytest.raises(ValueError, match=r"'wasted\.x' names no account"):
        ledger.account_of("wasted.x")
    with pytest.raises(ValueError, match=">= 0"):
        ledger.count(Counter(), Account.TRAINED, -1)


class CountingEngines:
    """A rollout whose groups carry the version of its choice and whose every handed-out token
    is counted: `generated` is the engines' own total, the ledger's reference."""

    def __init__(self, seed: int, fail_rate: float, refresh_rate: float = 0.0) -> None:
        self.rng = random.Random(seed)
        self.fail_rate = fail_rate
        self.refresh_rate = refresh_rate
        """How often a completed group ran a member again (the agent's refresh of a short
        stale member): the first run's samples are the group's `replaced`."""
        self.versions = ["v0"]
        self.generated = 0

    def _samples(self, index: int, attempt: int) -> list[Sample]:
        version = self.rng.choice(self.versions[-3:])  # sometimes late: stale at the sink
        return [
            Sample.build(
                prompt_tokens=[1],
                response_tokens=[5] * (n := self.rng.randint(1, 6)),
                response_versions=[version] * n,
                rollout_log_probs=[-0.1] * n,
                reward=float(j),
                group_id=f"p{index}-a{attempt}",
                parent_traj_id=f"p{index}-a{attempt}-{j}",
            )
            for j in range(2)
        ]

    async def rollout(self, index: int, attempt: int) -> Group:
        await asyncio.sleep(0)
        samples = self._samples(index, attempt)
        tokens = ledger.sample_tokens(samples)
        self.generated += tokens
        if self.rng.random() < self.fail_rate:
            refused = self.rng.random() < 0.5
            failed = GroupFailed(
                PARTIAL_ROLLOUT_STALENESS_EXCEEDED if refused else "engine_failed",
                staleness=refused,
            )
            failed.tokens = tokens
            raise failed
        replaced: tuple[Sample, ...] = ()
        if self.rng.random() < self.refresh_rate:
            replaced = (samples[0],)
            samples = [self._samples(index, attempt)[0], samples[1]]
            self.generated += ledger.sample_tokens(samples[:1])
        return Group(group_id=f"p{index}", samples=tuple(samples), replaced=replaced)


async def _train(c: AsyncRolloutCollector | SyncCollector, engines: CountingEngines) -> int:
    """Take batches until the data runs out or `steps`, publishing after each; the tokens of
    the batches handed out."""
    trained = 0
    for step in range(1, 6):
        try:
            batch = await c.next_batch()
        except CollectorClosed:
            break
        trained += ledger.sample_tokens(batch.samples)
        engines.versions.append(f"v{step}")
        c.on_weights_published(f"v{step}")
    return trained


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    keep=st.integers(0, 2),
    prompts=st.integers(2, 24),
    concurrency=st.integers(1, 4),
    fail_rate=st.sampled_from([0.0, 0.2]),
    refresh_rate=st.sampled_from([0.0, 0.5]),
)
def test_the_async_collectors_ledger_adds_up_to_what_the_engines_generated(
    seed: int, keep: int, prompts: int, concurrency: int, fail_rate: float, refresh_rate: float
) -> None:
    engines = CountingEngines(seed, fail_rate, refresh_rate)
    c = AsyncRolloutCollector(
        engines.rollout,
        num_prompts=prompts,
        batch_size=2,
        concurrency=concurrency,
        retry=RetryPolicy(max_retries=1, backoff_s=0.0),
        staleness=StalenessConfig(keep),
        admission=False,
    )

    async def run() -> int:
        async with c:
            return await _train(c, engines)

    trained = asyncio.run(run())
    book = c.stats.totals.ledger_tokens
    per_account = ledger.accounts(book)
    assert ledger.total(book) == engines.generated
    assert ledger.unaccounted(book, engines.generated) == 0
    assert per_account["trained"] == trained
    # The completed groups' tokens, and the members they ran again in `dropped.refreshed`.
    refreshed = book.get(ledger.entry(Account.DROPPED, ledger.REFRESHED), 0)
    assert per_account["dropped"] + per_account["surplus"] + trained == (
        c.stats.totals.generated_tokens + refreshed
    )


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), fail_rate=st.sampled_from([0.0, 0.3]))
def test_the_sync_collectors_ledger_adds_up_to_what_the_engines_generated(
    seed: int, fail_rate: float
) -> None:
    engines = CountingEngines(seed, fail_rate)
    c = SyncCollector(
        engines.rollout,
        batch_size=2,
        concurrency=2,
        retry=RetryPolicy(max_retries=1, backoff_s=0.0),
    )
    trained = asyncio.run(_train(c, engines))
    book = c.stats.totals.ledger_tokens
    assert ledger.total(book) == engines.generated
    assert ledger.accounts(book)["trained"] == trained


async def test_each_batch_carries_its_ledger_and_shutdown_counts_the_surplus() -> None:
    engines = CountingEngines(1, 0.0)
    c = AsyncRolloutCollector(
        engines.rollout,
        num_prompts=8,
        batch_size=2,
        concurrency=4,
        retry=RetryPolicy(max_retries=0, backoff_s=0.0),
        staleness=StalenessConfig(0),
        admission=False,
    )
    async with c:
        batch = await c.next_batch()
        for _ in range(50):  # let the worker complete what it may meanwhile
            await asyncio.sleep(0)
    assert batch.figures.ledger_tokens == {"trained": ledger.sample_tokens(batch.samples)}
    surplus = {k: v for k, v in c.stats.totals.ledger_tokens.items() if k.startswith("surplus")}
    assert sum(surplus.values()) > 0
    assert ledger.total(c.stats.totals.ledger_tokens) == engines.generated
