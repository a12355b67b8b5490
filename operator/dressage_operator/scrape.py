"""The HTTP GET of a job's `/metrics` (I/O, at the handlers' level); the parsing is pure
(`dressage_operator.staleness_scrape`)."""

from __future__ import annotations

import httpx

from dressage_operator.budget_scale import parse_budget_figures
from dressage_operator.eval_scrape import parse_evaluation
from dressage_operator.fleet_signals import parse_fleet_counters
from dressage_operator.staleness_scrape import ScrapeResult, parse_staleness


async def scrape(
    client: httpx.AsyncClient, url: str, limit_seconds: float, now: str
) -> ScrapeResult:
    """GET the job's metrics; never raises (a job without metrics yet is normal)."""
    try:
        response = await client.get(url, timeout=limit_seconds)
        response.raise_for_status()
        return ScrapeResult(
            url=url,
            staleness=parse_staleness(response.text, now),
            counters=parse_fleet_counters(response.text),
            budget=parse_budget_figures(response.text),
            evaluation=parse_evaluation(response.text),
        )
    except (httpx.HTTPError, ValueError) as exc:
        return ScrapeResult(url=url, error=f"{type(exc).__name__}: {exc}"[:300])
