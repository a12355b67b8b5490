"""The proxy process keeps at most `--max-sessions` live sessions: over HTTP, a session beyond the
cap with none abandoned is answered 429 `too_many_sessions` with `Retry-After`, and one that
takes an abandoned session's place is counted in `dressage_proxy_evicted_sessions_total`
(a simulated engine behind it: `dressage_testkit.sim_fleet`)."""

from __future__ import annotations

import httpx
import pytest
from dressage_testkit.proxy import start_proxy
from dressage_testkit.sim_fleet import SimFleet

from dressage import metrics
from tests.integration.proxy_support import metric_value

pytestmark = pytest.mark.integration


async def test_sessions_beyond_the_cap_are_refused_or_evict_abandoned_ones() -> None:
    async with SimFleet(1) as fleet:
        with start_proxy(fleet.urls, "--max-sessions", "2", "--session-evict-idle-s", "3600") as p:
            async with httpx.AsyncClient(base_url=p.base_url) as http:
                for sid in ("a", "b"):
                    created = await http.post("/sessions", json={"session_id": sid})
                    assert created.status_code == 201
                refused = await http.post("/sessions", json={"session_id": "c"})
                assert refused.status_code == 429
                assert refused.json()["error"]["type"] == "too_many_sessions"
                assert int(refused.headers["Retry-After"]) >= 1
        with start_proxy(fleet.urls, "--max-sessions", "2", "--session-evict-idle-s", "0") as p:
            async with httpx.AsyncClient(base_url=p.base_url) as http:
                for sid in ("a", "b", "c", "d"):
                    created = await http.post("/sessions", json={"session_id": sid})
                    assert created.status_code == 201
                assert (await http.get("/sessions/a")).status_code == 404
                assert (await http.get("/sessions/d")).status_code == 200
                text = (await http.get("/metrics")).text
    assert metric_value(text, metrics.PROXY_EVICTED_SESSIONS) == 2
