"""Draining an engine over real HTTP: two embedded engine processes behind a real proxy.

The two engines load the same weights under two version labels (`drain-a`, `drain-b`), so
every token's version says which engine generated it. A long generation runs on engine A; A
is drained through the proxy mid-generation; the turn finishes on B with A's tokens kept, and
the trained sample's per-token versions show it: A's label on the first tokens, B's on the
rest, every token there once. A crash (no drain) costs only the turn in flight, which the
proxy generates again on the other engine and counts by reason.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from asyncio.subprocess import PIPE
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from dressage_operator import children, naming
from dressage_operator.config import OperatorConfig
from dressage_testkit.engine import EngineProcess, start_engine
from dressage_testkit.processes import free_port
from dressage_testkit.proxy import start_proxy

from dressage.api import validate_job
from dressage.proxy.records import record_to_sample
from tests.integration.proxy_support import metric_value, session_busy, wait_for

pytestmark = pytest.mark.integration

PROMPT = [1, 5, 12, 23, 40]
PACE_MS = 4.0
"""Decode pacing: a generation of N tokens lasts at least N * 4 ms however loaded the machine
is, so 600 tokens outlast the wait before the drain (0.3 s, at most ~75 tokens) by seconds."""
LONG = {"max_new_tokens": 600, "ignore_eos": True, "temperature": 1.0}


@pytest.fixture
def two_engines(cache_dir: Path) -> Iterator[tuple[EngineProcess, EngineProcess]]:
    with (
        start_engine(
            cache_dir=cache_dir, weight_version="drain-a", min_step_interval_ms=PACE_MS
        ) as a,
        start_engine(
            cache_dir=cache_dir, weight_version="drain-b", min_step_interval_ms=PACE_MS
        ) as b,
    ):
        yield a, b


def _generate(client: httpx.AsyncClient, session_id: str) -> asyncio.Task[httpx.Response]:
    return asyncio.create_task(
        client.post(
            "/generate",
            headers={"X-Session-Id": session_id, "X-Instance-Id": f"{session_id}-prompt"},
            json={"input_ids": PROMPT, "sampling_params": LONG, "return_logprob": True},
        )
    )


async def _running_on(client: httpx.AsyncClient, session_id: str, task: Any) -> str:
    """Wait until the turn runs, then a moment for the engine to generate a few tokens
    (nothing the proxy shows says it has; pacing keeps the turn from ending meanwhile);
    returns the engine it runs on."""
    await wait_for(lambda: session_busy(client, session_id), what="generation in flight")
    await asyncio.wait({task}, timeout=0.3)
    assert not task.done(), "the generation should still be running"
    return str((await client.get(f"/sessions/{session_id}")).json()["engine_url"])


async def test_a_drained_engines_turn_finishes_on_the_other_with_its_tokens_kept(
    two_engines: tuple[EngineProcess, EngineProcess],
) -> None:
    a, b = two_engines
    args = ["--dressage-partial-rollout", "--record-token-versions"]
    with start_proxy([a.base_url, b.base_url], *args) as proxy:
        async with httpx.AsyncClient(base_url=proxy.base_url, timeout=120) as client:
            task = _generate(client, "drain-1")
            assert await _running_on(client, "drain-1", task) == a.base_url
            drained = await client.post("/dressage/engines/drain", json={"url": a.base_url})
            assert drained.status_code == 200, drained.text
            answer = drained.json()
            assert (answer["drained"], answer["inflight"]) == (True, 0)
            assert answer["aborted_generations"] == 1
            # Drained: A takes no new turn, sticky sessions included.
            view = {e["url"]: e for e in (await client.get("/dressage/engines")).json()["engines"]}
            assert (view[a.base_url]["draining"], view[a.base_url]["routable"]) == (True, False)

            response = await asyncio.wait_for(task, timeout=120)
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["dressage"]["engine"] == b.base_url
            assert len(body["output_ids"]) == LONG["max_new_tokens"]
            assert body["meta_info"]["finish_reason"]["type"] == "length"
            assert body["dressage"]["preempts"] == 1

            finalize = await client.post("/sessions/drain-1/finalize", json={"reward": 1.0})
            assert finalize.status_code == 200, finalize.text
            records = await client.get("/segments", params={"instance_id": "drain-1-prompt"})
            (record,) = records.json()["segments"]
            sample = record_to_sample(record)
            assert sample.tokens == (*PROMPT, *body["output_ids"])
            response_versions = sample.full_versions[len(PROMPT) :]
            on_a = response_versions.count("drain-a")
            # A's tokens first, then B's; none lost, none generated twice.
            assert 0 < on_a < LONG["max_new_tokens"]
            assert response_versions == ("drain-a",) * on_a + ("drain-b",) * (
                LONG["max_new_tokens"] - on_a
            )
            assert sample.full_versions[: len(PROMPT)] == (None,) * len(PROMPT)
            assert len(sample.rollout_log_probs) == LONG["max_new_tokens"]

            after = await client.post(
                "/generate",
                headers={"X-Session-Id": "drain-2"},
                json={"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 2}},
            )
            assert after.json()["dressage"]["engine"] == b.base_url
            metrics = (await client.get("/metrics")).text
            assert metric_value(metrics, "dressage_proxy_drained_turns_total") == 1
            assert metric_value(metrics, "dressage_proxy_engine_failed_turns_total") == 0

            # Undrained (a scale-down taken back), A is routed to again.
            undrained = await client.post("/dressage/engines/undrain", json={"url": a.base_url})
            assert undrained.json() == {"url": a.base_url, "draining": False, "routable": True}


async def test_the_engine_pods_prestop_hook_drains_it_through_the_proxy(
    two_engines: tuple[EngineProcess, EngineProcess],
) -> None:
    """The operator's `preStop` program, run as the kubelet runs it before SIGTERM (the pod's
    command and environment, the proxy's and engine's URLs made local), with a proxy token."""
    a, b = two_engines
    job = validate_job(
        {
            "apiVersion": "dressage.io/v1alpha1",
            "kind": "AsyncRLJob",
            "metadata": {"name": "job"},
            "spec": {"model": {"source": "builtin:tiny"}, "inference": {"replicas": 2}},
        }
    )
    pod = children.build_engine_pod(job, children.Owner("job", "ns", "uid"), OperatorConfig(), 0)
    (container,) = pod["spec"]["containers"]
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    env = {e["name"]: e.get("value", "") for e in container["env"]}
    assert env["DRESSAGE_ENGINE_URL"] == naming.engine_url("job", "ns", 0)
    token = "drain-token"
    args = ["--dressage-partial-rollout", "--record-token-versions", "--auth-token", token]
    with start_proxy([a.base_url, b.base_url], *args) as proxy:
        auth = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=proxy.base_url, timeout=120, headers=auth) as client:
            task = _generate(client, "hook-1")
            assert await _running_on(client, "hook-1", task) == a.base_url
            local = {
                "PATH": os.environ["PATH"],
                "DRESSAGE_ENGINE_URL": a.base_url,
                "DRESSAGE_PROXY_URL": proxy.base_url,
                "DRESSAGE_PROXY_TOKEN": token,
            }
            command = [sys.executable if command[0] == "python" else command[0], *command[1:]]
            hook = await asyncio.create_subprocess_exec(
                *command, env=local, stdout=PIPE, stderr=PIPE
            )
            out, err = await asyncio.wait_for(hook.communicate(), timeout=60)
            assert hook.returncode == 0, err.decode()
            # One line per proxy replica (here one), naming the replica it drained on.
            assert out.decode().startswith(f"{proxy.base_url} drained:"), (
                out.decode(),
                err.decode(),
            )
            assert '"drained":true' in out.decode()
            response = await asyncio.wait_for(task, timeout=120)
            assert response.status_code == 200, response.text
            versions = response.json()["dressage"]["versions"]
            on_a = versions.count("drain-a")
            assert 0 < on_a < len(versions) == LONG["max_new_tokens"]
            assert versions == ["drain-a"] * on_a + ["drain-b"] * (len(versions) - on_a)
    # With the proxy gone the hook says so and returns: it never holds the stop up.
    gone = {**local, "DRESSAGE_PROXY_URL": f"http://127.0.0.1:{free_port()}"}
    hook = await asyncio.create_subprocess_exec(*command, env=gone, stdout=PIPE, stderr=PIPE)
    out, err = await asyncio.wait_for(hook.communicate(), timeout=60)
    assert hook.returncode == 0
    assert err.decode().startswith(f"{gone['DRESSAGE_PROXY_URL']} drain failed:"), err.decode()


async def test_draining_an_unknown_engine_is_a_404_naming_the_engines(
    two_engines: tuple[EngineProcess, EngineProcess],
) -> None:
    a, b = two_engines
    with start_proxy([a.base_url, b.base_url]) as proxy:
        async with httpx.AsyncClient(base_url=proxy.base_url, timeout=30) as client:
            response = await client.post(
                "/dressage/engines/drain", json={"url": "http://127.0.0.1:9"}
            )
            assert response.status_code == 404
            error = response.json()["error"]
            assert error["param"] == "url"
            assert error["detail"]["engines"] == [a.base_url, b.base_url]
            bad = await client.post(
                "/dressage/engines/drain", json={"url": a.base_url, "timeout_s": 0}
            )
            assert (bad.status_code, bad.json()["error"]["param"]) == (400, "timeout_s")


async def test_a_crashed_engine_costs_its_turn_in_flight_retried_and_counted_by_reason(
    two_engines: tuple[EngineProcess, EngineProcess],
) -> None:
    a, b = two_engines
    engines = {a.base_url: a, b.base_url: b}
    with start_proxy(list(engines), "--record-token-versions") as proxy:
        async with httpx.AsyncClient(base_url=proxy.base_url, timeout=120) as client:
            task = _generate(client, "crash-1")
            victim = await _running_on(client, "crash-1", task)
            engines[victim].process.send_signal(signal.SIGKILL)
            response = await asyncio.wait_for(task, timeout=120)
            assert response.status_code == 200, response.text
            body = response.json()
            survivor = next(url for url in engines if url != victim)
            assert body["dressage"]["engine"] == survivor
            # Generated again from its prompt on the survivor: every token carries its label.
            label = "drain-a" if survivor == a.base_url else "drain-b"
            assert body["dressage"]["versions"] == [label] * LONG["max_new_tokens"]
            metrics = (await client.get("/metrics")).text
            lost = 'dressage_proxy_engine_failed_turns_total{reason="connection_lost"}'
            assert metric_value(metrics, lost) == 1
            assert metric_value(metrics, "dressage_proxy_engine_failed_turns_total") == 1
            assert metric_value(metrics, "dressage_proxy_engine_retries_total") == 1
            assert metric_value(metrics, "dressage_proxy_drained_turns_total") == 0
