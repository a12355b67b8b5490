"""`weightSync: distributed` with an engine fleet that changes while the trainer trains: an
engine added (scale-up), one killed (crash), one removed (scale-down), one replaced on the
same address, and a member replaced on its own address before any publish saw it gone, each
between two publishes, with one trainer and one publisher throughout.

Real processes on loopback: a `dressage proxy` reading its engine list from a file (as the
operator's ConfigMap is read), embedded engines playing each tested SGLang release, and in this
process the trainer's rank 0: a model trained one optimizer step per version and a
`CollectivePublisher` broadcasting its weights over gloo. After every publish every engine the
proxy routes to serves the current version with exactly the trainer's weights (its logprobs
are the trainer's), and an engine that joined is not routed to before it does: it gets them
in the next publish, or, when the current version was also written to storage, from there.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from dressage_testkit.engine import EngineProcess, start_engine
from dressage_testkit.proxy import start_proxy
from dressage_testkit.trainer import small_model
from transformers import LlamaForCausalLM

from dressage.proxy.client import ProxyRolloutClient
from dressage.weights.collective import CollectivePublisher
from dressage.weights.engines import ProxyEngines
from tests.integration.proxy_support import wait_for
from tests.integration.test_weight_sync import engine_logprobs, model_logprobs

pytestmark = pytest.mark.integration
torch.set_num_threads(1)

TIMEOUT_S = 120.0
"""Bound on a group's rendezvous and each broadcast: a hang fails the test instead."""
HEALTH_INTERVAL = "0.5"


def write_engines(path: Path, urls: list[str]) -> None:
    staged = path.with_name(path.name + ".new")
    staged.write_text("\n".join(urls) + "\n")
    os.replace(staged, path)


async def engines_of(proxy_url: str) -> dict[str, dict[str, Any]]:
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.get(proxy_url + "/dressage/engines")
        response.raise_for_status()
        return {e["url"]: e for e in response.json()["engines"]}


class Trainer:
    """The trainer's model, one SGD step on a fixed sequence per version."""

    def __init__(self, path: Path) -> None:
        self.model = LlamaForCausalLM.from_pretrained(path)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.5)

    def step(self) -> None:
        self.model.train()
        ids = torch.tensor([[5, 11, 17, 23, 29, 2, 6, 8, 9]])
        loss = self.model(ids, labels=ids).loss
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        self.model.eval()

    def weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in self.model.state_dict().items():
            yield name, tensor.detach().clone()


async def serve_the_trainers_weights(trainer: Trainer, url: str) -> None:
    output, logprobs = await engine_logprobs(url)
    assert logprobs == pytest.approx(model_logprobs(trainer.model, output), abs=1e-4), url


async def test_engines_join_leave_and_crash_between_publishes_without_a_trainer_restart(
    tmp_path: Path, engine_release: str
) -> None:
    served = small_model(tmp_path / "served", seed=0)
    trainer = Trainer(small_model(tmp_path / "trained", seed=1))
    listing = tmp_path / "engines"

    def engine(*extra: str) -> EngineProcess:
        return stack.enter_context(
            start_engine(
                model=str(served),
                weight_version="v0",
                sglang_release=engine_release,
                extra_args=extra,
            )
        )

    with ExitStack() as stack:
        a, b = engine(), engine()
        write_engines(listing, [a.base_url, b.base_url])
        proxy = stack.enter_context(
            start_proxy(
                [], "--engine-urls-file", str(listing), "--health-interval-s", HEALTH_INTERVAL
            )
        )
        client = ProxyRolloutClient(proxy.base_url)
        publisher = CollectivePublisher(
            ProxyEngines(client),
            weights=trainer.weights,
            master_address="127.0.0.1",
            master_port=0,
            backend="gloo",
            bucket_bytes=64 * 1024,
            pause_mode="abort",
            update_timeout_s=TIMEOUT_S,
        )
        version = 0

        async def healthy(urls: list[str]) -> bool:
            view = await engines_of(proxy.base_url)
            return set(view) == set(urls) and all(view[u]["healthy"] for u in urls)

        async def train_and_publish(routed: list[str]) -> None:
            """One training step and its publish; then exactly `routed` are routed to, each
            on the new version with the trainer's weights."""
            nonlocal version
            version += 1
            trainer.step()
            await publisher.publish(tmp_path / "not-written", f"v{version}")
            view = await engines_of(proxy.base_url)
            assert sorted(u for u, e in view.items() if e["routable"]) == sorted(routed)
            for url in routed:
                assert view[url]["weight_version"] == f"v{version}"
                await serve_the_trainers_weights(trainer, url)

        try:
            await wait_for(lambda: healthy([a.base_url, b.base_url]), timeout_s=60, what="up")
            change = await publisher.start()
            assert sorted(change.joined) == sorted([a.base_url, b.base_url])
            await train_and_publish([a.base_url, b.base_url])

            # Scale-up: C starts on other weights as v0 and is not routed to until the next
            # publish has sent it the current ones.
            c = engine()
            write_engines(listing, [a.base_url, b.base_url, c.base_url])
            await wait_for(lambda: healthy([a.base_url, b.base_url, c.base_url]), timeout_s=60)
            assert not (await engines_of(proxy.base_url))[c.base_url]["routable"]
            await train_and_publish([a.base_url, b.base_url, c.base_url])
            assert sorted(publisher.sender.members) == sorted([a.base_url, b.base_url, c.base_url])
            b_group = publisher.sender.group_of(b.base_url)

            # A crash: B dies, still listed (the operator has not replaced it yet), and the
            # proxy may not have noticed before the publish.
            b.process.kill()
            b.process.wait(timeout=30)
            await train_and_publish([a.base_url, c.base_url])
            assert sorted(publisher.sender.members) == sorted([a.base_url, c.base_url])

            # Scale-down: C leaves the list (B too); the publish goes to A alone.
            write_engines(listing, [a.base_url])
            await wait_for(lambda: healthy([a.base_url]), timeout_s=60, what="scale-down")
            await train_and_publish([a.base_url])
            assert publisher.sender.members == [a.base_url]

            # B's replacement on B's address, on its start-up weights: it joins a group under
            # a new name and is routed to once it serves the current version.
            b2 = engine("--port", str(b.port))
            write_engines(listing, [a.base_url, b2.base_url])
            await wait_for(lambda: healthy([a.base_url, b2.base_url]), timeout_s=60)
            assert not (await engines_of(proxy.base_url))[b2.base_url]["routable"]
            await train_and_publish([a.base_url, b2.base_url])
            assert publisher.sender.group_of(b2.base_url) not in (None, b_group)

            # A version also written to storage (a checkpoint step): an engine that joins
            # after its publish loads it from there and is routed to before any publish.
            version += 1
            trainer.step()
            checkpoint = tmp_path / f"v{version}"
            trainer.model.save_pretrained(checkpoint)
            await publisher.publish(checkpoint, f"v{version}")
            d = engine()
            write_engines(listing, [a.base_url, b2.base_url, d.base_url])

            async def caught_up() -> bool:
                view = (await engines_of(proxy.base_url)).get(d.base_url)
                return view is not None and view["routable"] and view["weight_version"] == "v6"

            await wait_for(caught_up, timeout_s=90, what="catch-up from storage")
            await serve_the_trainers_weights(trainer, d.base_url)
            assert version == 6

            # A member replaced on its own address between two publishes, before any publish
            # saw it gone (a pod recreated under its name): the new process holds none of the
            # old one's group, so it gets a group of its own instead of a broadcast that would
            # wait on the dead one until the timeout.
            await train_and_publish([a.base_url, b2.base_url, d.base_url])
            a_group = publisher.sender.group_of(a.base_url)
            a.process.kill()
            a.process.wait(timeout=30)
            a2 = engine("--port", str(a.port))
            await wait_for(lambda: healthy([a2.base_url, b2.base_url, d.base_url]), timeout_s=60)
            await train_and_publish([a2.base_url, b2.base_url, d.base_url])
            assert publisher.sender.group_of(a2.base_url) not in (None, a_group)
        finally:
            await publisher.aclose()
            await client.aclose()
