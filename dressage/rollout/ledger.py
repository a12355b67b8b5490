"""The token ledger: where every token an engine generated for the run went.

Each generated token is counted in exactly one account, under one entry (`account` or
`account.reason`):

- `trained`: in a sample of a batch handed to the trainer, inside its loss;
- `masked.<reason>`: in such a sample but left out of the loss (`old_version`: older than the
  span limit allows, `staleness.spanLimitPolicy: mask_old_tokens`), kept as context;
- `dropped.<reason>`: in a completed group the batch sink dropped (a staleness verdict such
  as `stale_version` or `window_advanced`), or `dropped.refreshed`: in a short trajectory of a
  completed group that was run again under the live version so that the sink keeps the
  group (`dressage.agents.groups.stale_short_members`; `Group.replaced`);
- `refused.<reason>`: in an attempt a staleness control refused (the proxy's span limit,
  `partial_rollout_staleness_exceeded`), whose group is then generated again;
- `aborted.<reason>`: in an attempt that failed otherwise (an engine lost mid-turn, a drain
  without partial rollout, a cancelled trajectory, an agent that failed);
- `evaluation`: generated for a held-out evaluation;
- `surplus.<reason>`: generated and neither trained nor dropped when the run stopped (groups
  completed but `pending` in the candidate batch or `queued` behind it).

The entries are the by-reason figure `ledger_tokens` (`dressage.api.figures`): per step, on
`/metrics`, in the report, which plots the accounts stacked. The tokens of turns that never
reached a sample only the proxy counts (`dressage_proxy_lost_tokens_total{reason,
evaluation}`); `lost_entry` is their entry, for the steps' records
(`dressage.rollout.proxy_ledger`) and the run's end (`dressage.runner.ledger_report`) alike.
Why accounts of whole attempts and groups: the drop unit is the group and the retry unit its
attempt, so a token's fate is its group's. This module is pure: the collector
(`dressage.rollout.collector`), the retry policy and the evaluator decide which account, and
count here.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Mapping

from dressage.api.figures import LEDGER_ACCOUNTS
from dressage.data.groups import Group
from dressage.data.samples import Sample
from dressage.proxy.span_rule import staleness_error_names


class Account(enum.StrEnum):
    """The ledger's accounts, in the order the report stacks them."""

    TRAINED = "trained"
    MASKED = "masked"
    DROPPED = "dropped"
    REFUSED = "refused"
    ABORTED = "aborted"
    EVALUATION = "evaluation"
    SURPLUS = "surplus"


ACCOUNTS: tuple[str, ...] = LEDGER_ACCOUNTS
"""Declared with the figure (`dressage.api.figures`), which the job model's layer holds; a
test keeps them and `Account` in step."""
SEPARATOR = "."
REFRESHED = "refreshed"
"""The `dropped` reason of trajectories a completed group replaced by a rerun."""


def entry(account: Account, reason: str | None = None) -> str:
    """The ledger entry of `account` (and `reason`): `trained`, `dropped.stale_version`."""
    return account.value if not reason else f"{account.value}{SEPARATOR}{reason}"


def account_of(key: str) -> Account:
    """The account an entry belongs to; a one-line error names an entry of no account."""
    name = key.split(SEPARATOR, 1)[0]
    try:
        return Account(name)
    except ValueError:
        raise ValueError(
            f"ledger entry {key!r} names no account (one of {', '.join(ACCOUNTS)})"
        ) from None


def lost_entry(reason: str, evaluation: bool) -> str:
    """The entry of tokens the proxy counted as lost (`dressage_proxy_lost_tokens_total`) under
    `reason` in an evaluation session or not: `evaluation` for an evaluation's, else
    `refused.<reason>` for a staleness refusal's (`staleness_error_names`, the group is
    generated again), else `aborted.<reason>` (a failed or cancelled turn, `restarted`)."""
    if evaluation:
        return entry(Account.EVALUATION)
    refused = reason in staleness_error_names()
    return entry(Account.REFUSED if refused else Account.ABORTED, reason)


def lost_entries(lost: Mapping[tuple[str, bool], float]) -> Counter[str]:
    """The proxy's lost tokens by (reason, evaluation session) as ledger entries
    (`lost_entry`)."""
    book: Counter[str] = Counter()
    for (reason, evaluation), tokens in lost.items():
        if round(tokens):
            book[lost_entry(reason, evaluation)] += round(tokens)
    return book


def sample_tokens(samples: Iterable[Sample]) -> int:
    """The tokens the engines generated for `samples`: their trainable response tokens
    (loss mask 1), as `generated_tokens` counts them."""
    return sum(sum(s.loss_mask) for s in samples)


def group_tokens(group: Group) -> int:
    return sample_tokens(group.samples)


def count(ledger: Counter[str], account: Account, tokens: int, reason: str | None = None) -> None:
    """Count `tokens` in `ledger` under `account` (and `reason`); 0 tokens add no entry."""
    if tokens < 0:
        raise ValueError(f"ledger tokens must be >= 0, got {tokens}")
    if tokens:
        ledger[entry(account, reason)] += tokens


def accounts(ledger: Mapping[str, int | float]) -> dict[str, int]:
    """The ledger's entries summed per account, every account present (0 when empty)."""
    out = dict.fromkeys(ACCOUNTS, 0)
    for key, tokens in ledger.items():
        out[account_of(key).value] += int(tokens)
    return out


def total(ledger: Mapping[str, int | float]) -> int:
    """Every token the ledger holds."""
    return sum(int(v) for v in ledger.values())


def unaccounted(ledger: Mapping[str, int | float], engines_generated: int) -> int:
    """Tokens the engines report generating (`sglang:generation_tokens_total` summed over
    the engines) that no account holds: 0 when the ledger is complete; positive for tokens
    lost where the ledger does not look (a turn whose tokens never reached a sample)."""
    return engines_generated - total(ledger)
