"""The run's token ledger against what its engines report generating, for `report.json`.

Three sides meet here, read as the run ends while its proxy and engines still serve:

- the collector's ledger (`dressage.rollout.ledger`): trained, dropped, refused and aborted
  attempts' finished trajectories, evaluation, surplus pending or queued;
- the proxy's `dressage_proxy_lost_tokens_total{reason, evaluation}`: tokens of turns that
  never reached a sample (a refused, failed or cancelled turn; a preempted turn generated again
  without partial rollout), counted as `refused.<reason>` for a staleness refusal,
  `evaluation` for an evaluation session, else `aborted.<reason>` (`ledger.lost_entry`). The
  steps' records hold what each step read of them (`dressage.rollout.proxy_ledger`), so the
  end adds only what the proxies counted beyond the last step's read;
- the engines' own `sglang:generation_tokens_total` (every label set, every engine listed at
  the end: SGLang's name in 0.5.2 and 0.5.23 alike, `dressage.metrics.sglang`).

What the engines generated beyond the first two is `surplus.in_flight`: generations running when
the run stopped (in an async run, the groups in flight), and whatever else the ledger did not
see. An engine count below the ledger's is `overcounted` (a bug to report, never hidden).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from dressage.api.figures import figure
from dressage.metrics.sglang import GENERATION_TOKENS
from dressage.rollout import ledger
from dressage.rollout.ledger import Account
from dressage.rollout.proxy_ledger import LostCounts, ProxyLostTokens, add_counts, parse_lost
from dressage.runner.scrape import metrics_texts

IN_FLIGHT = "in_flight"
_LEDGER_KEY = figure("ledger_tokens").key


def run_ledger(
    collected: Mapping[str, float],
    proxy_lost: Mapping[tuple[str, bool], float],
    engines_generated: float | None,
) -> dict[str, Any]:
    """The run's ledger (pure): the collector's entries, the proxy's lost tokens by (reason,
    evaluation session) that no step's record holds, and the residue against
    `engines_generated` (None: not read)."""
    book: Counter[str] = Counter({k: int(v) for k, v in collected.items() if v})
    book.update(ledger.lost_entries(proxy_lost))
    seen = ledger.total(book)
    overcounted = 0
    if engines_generated is not None:
        residue = int(engines_generated) - seen
        ledger.count(book, Account.SURPLUS, max(0, residue), IN_FLIGHT)
        overcounted = max(0, -residue)
    return {
        "entries": dict(sorted(book.items())),
        "accounts": ledger.accounts(book),
        "total": ledger.total(book),
        "engines_generated": None if engines_generated is None else int(engines_generated),
        "overcounted": overcounted,
    }


def _samples(text: str, name: str) -> Iterable[tuple[dict[str, str], float]]:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                yield sample.labels, sample.value


async def read_run_ledger(
    collected: Mapping[str, float],
    proxy_urls: Iterable[str],
    engine_urls: Iterable[str],
    steps_read: ProxyLostTokens | None = None,
) -> dict[str, Any]:
    """`run_ledger` with the proxies' lost tokens and the engines' generated tokens read from
    their `/metrics`; the engines' count is None when an engine did not answer.
    `steps_read`: the reader that put the proxies' lost tokens in the steps' records, which
    `collected` holds: only what each replica counted beyond its last read is added (None:
    no step read them, all are added). `proxy_lost` in the answer: what the proxies' counters
    hold at the end (`counted`), what the steps' records hold of them (`in_steps`) and what the
    end added (`at_end`); with proxies that did not restart, `in_steps + at_end == counted`."""
    reader = ProxyLostTokens() if steps_read is None else steps_read
    async with httpx.AsyncClient(timeout=10.0) as client:
        proxies = await metrics_texts(client, proxy_urls)
        engine_texts = await metrics_texts(client, engine_urls)
    final: dict[str, LostCounts | None] = {}
    for url, text in proxies.items():
        try:
            final[url] = None if text is None else parse_lost(text)
        except ValueError:
            final[url] = None
    engines_read = all(text is not None for text in engine_texts.values())
    engines = sum(
        v for text in engine_texts.values() if text for _, v in _samples(text, GENERATION_TOKENS)
    )
    lost = reader.remainder(final)
    report = run_ledger(collected, lost, engines if engines_read else None)
    counted: LostCounts = {}
    for counts in final.values():
        add_counts(counted, counts or {})
    report["proxy_lost"] = {
        "counted": ledger.total(ledger.lost_entries(counted)),
        "in_steps": ledger.total(reader.attributed),
        "at_end": ledger.total(ledger.lost_entries(lost)),
    }
    return report


def ledger_line(report: Mapping[str, Any]) -> str:
    """The end-of-run line: the engines' tokens and each account's share of the ledger."""
    total = int(report["total"]) or 1
    shares = ", ".join(
        f"{name} {int(n)} ({100 * int(n) / total:.0f}%)"
        for name, n in report["accounts"].items()
        if n
    )
    engines = report.get("engines_generated")
    head = f"{engines} tokens generated by the engines" if engines is not None else "tokens"
    over = f"; {report['overcounted']} overcounted" if report.get("overcounted") else ""
    return f"token ledger: {head}: {shares or 'none'}{over}"


LEDGER_PLOT = "token_ledger.png"


def plot_ledger(
    run_root: Path, steps: Sequence[Mapping[str, Any]], token_ledger: Mapping[str, Any] | None
) -> Path:
    """`token_ledger.png`: each step's ledger accounts stacked (what the collector counted
    for its batch, and the proxy's lost tokens read during the step), and, when the run's
    ledger was read at its end, one more bar `end` with the whole run's accounts (the surplus
    included)."""
    from matplotlib.figure import Figure

    labels = [str(s["step"]) for s in steps]
    columns = [ledger.accounts(dict(s.get(_LEDGER_KEY, {}))) for s in steps]
    if token_ledger is not None:
        labels.append("end")
        columns.append(dict(token_ledger["accounts"]))
    fig = Figure(figsize=(6, 3.5), dpi=100)
    fig.subplots_adjust(left=0.13, right=0.97, top=0.9, bottom=0.15)
    ax = fig.add_subplot()
    bottoms = [0] * len(columns)
    for account in ledger.ACCOUNTS:
        heights = [int(c.get(account, 0)) for c in columns]
        if any(heights):
            ax.bar(labels, heights, bottom=bottoms, label=account)
            bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    if any(bottoms):
        ax.legend(loc="best", fontsize=8)
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    title = "Generated tokens by ledger account"
    if token_ledger is not None and token_ledger.get("engines_generated") is not None:
        title += f" (engines: {token_ledger['engines_generated']}; end: whole run)"
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("step")
    ax.set_ylabel("tokens")
    if len(labels) > 20:  # one tick in ten: a long run's labels would overlap
        ax.set_xticks(range(0, len(labels), 10), labels[::10])
    out = run_root / LEDGER_PLOT
    fig.savefig(out)
    return out
