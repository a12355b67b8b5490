"""A LoRA job's publish path end to end on loopback: a real embedded engine started with
`--enable-lora`, a real proxy in LoRA mode (`--lora-base-version v0`) and the `LoraPublisher`
that reaches the engines through it. `v0` is the base (nothing loaded); each later version is
an adapter the engine loads by name, every generation through the proxy then names it and
carries its version, with PEFT's logprobs; adapters older than the newest two are unloaded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch
from dressage_testkit.engine import EngineProcess, start_engine
from dressage_testkit.proxy import ProxyProcess, start_proxy
from dressage_testkit.trainer import small_model

from dressage.api.lora import LoraSpec
from dressage.engine import EngineClient
from dressage.engine.lora import load_lora_adapter, unload_lora_adapter
from dressage.proxy.client import ProxyRolloutClient
from dressage.trainer.grpo import load_policy
from dressage.trainer.lora import iter_adapter, load_adapter, wrap_lora, write_adapter
from dressage.weights.engines import ProxyEngines
from dressage.weights.lora import LoraPublisher

pytestmark = pytest.mark.integration
torch.set_num_threads(1)

PROMPT = [5, 11, 17, 23, 29, 2, 6]
RANK = 4


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_model(tmp_path_factory.mktemp("base"), seed=0)


def _adapter(model: Path, out: Path, seed: int) -> Path:
    torch.manual_seed(seed)
    peft_model = wrap_lora(load_policy(model, torch.device("cpu")), LoraSpec(rank=RANK))
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if ".lora_B." in name:
                param.normal_(0.0, 0.3)
    write_adapter(peft_model, dict(iter_adapter(peft_model, torch.float32)), out)
    return out


@pytest.fixture(scope="module")
def engine(model: Path) -> Iterator[EngineProcess]:
    args = ["--enable-lora", "--max-lora-rank", str(RANK)]
    with start_engine(model=str(model), extra_args=args) as process:
        yield process


@pytest.fixture(scope="module")
def proxy(engine: EngineProcess) -> Iterator[ProxyProcess]:
    args = ["--record-token-versions", "--lora-base-version", "v0"]
    with start_proxy([engine.base_url], *args) as process:
        yield process


async def _turn(client: httpx.AsyncClient, session: str) -> tuple[list[int], list[float], str]:
    answer = await client.post(
        "/generate",
        headers={"X-Session-Id": session},
        json={
            "input_ids": PROMPT,
            "sampling_params": {"max_new_tokens": 5, "temperature": 0.0, "ignore_eos": True},
            "return_logprob": True,
        },
    )
    assert answer.status_code == 200, answer.text
    data = answer.json()
    logprobs = [entry[0] for entry in data["meta_info"]["output_token_logprobs"]]
    return data["output_ids"], logprobs, data["meta_info"]["weight_version"]


def _reference(policy: torch.nn.Module, output: list[int]) -> list[float]:
    ids = torch.tensor([PROMPT + output])
    with torch.no_grad():
        logprobs = torch.log_softmax(policy.eval()(ids).logits[0].float(), dim=-1)
    return [float(logprobs[len(PROMPT) - 1 + i, t]) for i, t in enumerate(output)]


async def test_each_version_is_an_adapter_the_proxy_names_and_stamps(
    model: Path, engine: EngineProcess, proxy: ProxyProcess, tmp_path: Path
) -> None:
    rollout = ProxyRolloutClient(proxy.base_url)
    publisher = LoraPublisher(ProxyEngines(rollout), catch_up_interval_s=None)
    try:
        assert await publisher.sync(model, "v0") is False  # the base: nothing to load
        async with httpx.AsyncClient(base_url=proxy.base_url, timeout=60) as client:
            ids, logprobs, version = await _turn(client, "s0")
            assert version == "v0"
            base = load_policy(model, torch.device("cpu"))
            torch.testing.assert_close(logprobs, _reference(base, ids), atol=1e-5, rtol=0)
            for i in (1, 2, 3):
                adapter = _adapter(model, tmp_path / f"v{i}", seed=i)
                await publisher.publish(adapter, f"v{i}")
                ids, logprobs, version = await _turn(client, f"s{i}")
                assert version == f"v{i}"
                policy = load_adapter(load_policy(model, torch.device("cpu")), adapter)
                torch.testing.assert_close(logprobs, _reference(policy, ids), atol=1e-5, rtol=0)
        await publisher.unloads_done()
        async with EngineClient(engine.base_url) as direct:
            # A load answers every adapter then loaded: the newest two and this one.
            loaded = await load_lora_adapter(direct, "probe", str(tmp_path / "v3"))
            assert set(loaded) == {"v2", "v3", "probe"}
            await unload_lora_adapter(direct, "probe")
        assert publisher.loaded == {engine.base_url: ["v2", "v3"]}
    finally:
        await publisher.aclose()
        await rollout.aclose()
