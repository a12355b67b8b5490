"""The `/metrics` texts of a run's proxies and engines, read as the run ends (the end-of-run
ledger and churn figures read the same counters the step line does, once more)."""

from __future__ import annotations

from collections.abc import Iterable

import httpx


async def metrics_texts(client: httpx.AsyncClient, urls: Iterable[str]) -> dict[str, str | None]:
    """Each server's `GET /metrics` text by its URL (whitespace and a trailing `/` removed),
    one after another; None for one that did not answer or answered an error status."""
    texts: dict[str, str | None] = {}
    for raw in urls:
        url = raw.strip().rstrip("/")
        try:
            answer = await client.get(f"{url}/metrics")
            answer.raise_for_status()
        except httpx.HTTPError:
            texts[url] = None
            continue
        texts[url] = answer.text
    return texts
