"""The scrape's I/O: one GET of the job's `/metrics` that never raises, over httpx's in-process
transport (no server: what the answer does to the status is `decide`'s, tested there)."""

from __future__ import annotations

import httpx
from dressage_operator.scrape import scrape

URL = "http://job-a-trainer-0.job-a-trainer.ns.svc:9400/metrics"
TEXT = "# TYPE dressage_train_step gauge\ndressage_train_step 7\n"


def _client(handler: httpx.MockTransport) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=handler)


async def test_a_scrape_parses_the_answer_and_stamps_the_time() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, text=TEXT)

    async with _client(httpx.MockTransport(answer)) as client:
        result = await scrape(client, URL, 3.0, "2026-01-01T12:00:00Z")
    assert [str(r.url) for r in seen] == [URL]
    assert (result.url, result.error) == (URL, "")
    assert result.staleness is not None
    assert result.staleness.step == 7
    assert result.staleness.last_scrape_time == "2026-01-01T12:00:00Z"


async def test_an_error_answer_or_no_answer_is_a_result_naming_it() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, text="starting")

    def unreachable(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async with _client(httpx.MockTransport(refuse)) as client:
        refused = await scrape(client, URL, 3.0, "t")
    async with _client(httpx.MockTransport(unreachable)) as client:
        down = await scrape(client, URL, 3.0, "t")
    assert refused.staleness is None
    assert refused.error.startswith("HTTPStatusError")
    assert "503" in refused.error
    assert down.staleness is None
    assert down.error == "ConnectError: connection refused"
