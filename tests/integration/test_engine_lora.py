"""LoRA adapters on a real embedded-engine process, for every SGLang release it plays: an
adapter loaded by name with `/load_lora_adapter` serves `/generate` requests that name it in
`lora_path` with PEFT's own logprobs (the tolerance the full-weight sync tests use), requests
without it keep the base model, both in one batch, and `/unload_lora_adapter` removes the name.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from dressage_testkit.engine import EngineProcess, start_engine
from dressage_testkit.trainer import small_model

from dressage.api.lora import LoraSpec
from dressage.engine import EngineClient, EngineRequestError, GenerateRequest, SamplingParams
from dressage.engine.lora import load_lora_adapter, unload_lora_adapter
from dressage.trainer.grpo import load_policy
from dressage.trainer.lora import iter_adapter, load_adapter, wrap_lora, write_adapter

pytestmark = pytest.mark.integration
torch.set_num_threads(1)

PROMPT = [5, 11, 17, 23, 29, 2, 6]


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return small_model(tmp_path / "base", seed=0)


@pytest.fixture
def adapter(model: Path, tmp_path: Path) -> Path:
    """A PEFT adapter on every projection with random A and B (a trained adapter's shape)."""
    torch.manual_seed(3)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    spec = LoraSpec(rank=4, alpha=8.0, target_modules=targets)
    peft_model = wrap_lora(load_policy(model, torch.device("cpu")), spec)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if ".lora_B." in name:
                param.normal_(0.0, 0.3)
    out = tmp_path / "adapter"
    write_adapter(peft_model, dict(iter_adapter(peft_model, torch.float32)), out)
    return out


@pytest.fixture
def engine(model: Path, engine_release: str) -> Iterator[EngineProcess]:
    lora = ["--enable-lora", "--max-lora-rank", "8"]
    with start_engine(model=str(model), sglang_release=engine_release, extra_args=lora) as process:
        yield process


async def _greedy(client: EngineClient, lora: str | None) -> tuple[list[int], list[float]]:
    params = SamplingParams(max_new_tokens=6, temperature=0.0, ignore_eos=True)
    req = GenerateRequest(input_ids=PROMPT, sampling_params=params, return_logprob=True)
    if lora is not None:
        req.lora_path = lora
    response = await client.generate(req)
    return response.output_ids, response.output_logprobs()


def _reference(model: torch.nn.Module, output: list[int]) -> list[float]:
    ids = torch.tensor([PROMPT + output])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
    start = len(PROMPT) - 1
    return [float(logprobs[start + i, token]) for i, token in enumerate(output)]


async def test_an_adapter_loaded_by_name_serves_peft_logprobs_beside_the_base(
    engine: EngineProcess, model: Path, adapter: Path
) -> None:
    base = load_policy(model, torch.device("cpu")).eval()
    peft = load_adapter(load_policy(model, torch.device("cpu")), adapter).eval()
    async with EngineClient(engine.base_url) as client:
        with pytest.raises(EngineRequestError, match="not loaded: v1"):
            await _greedy(client, "v1")
        loaded = await load_lora_adapter(client, "v1", str(adapter))
        assert loaded == {"v1": str(adapter)}
        with pytest.raises(EngineRequestError, match="already loaded"):
            await load_lora_adapter(client, "v1", str(adapter))
        # One batch: the base row and the adapter row decode side by side.
        (base_ids, base_lps), (lora_ids, lora_lps) = await asyncio.gather(
            _greedy(client, None), _greedy(client, "v1")
        )
        torch.testing.assert_close(base_lps, _reference(base, base_ids), atol=1e-5, rtol=0)
        torch.testing.assert_close(lora_lps, _reference(peft, lora_ids), atol=1e-5, rtol=0)
        # The adapter changes the policy (the comparison above can fail).
        on_base = _reference(base, lora_ids)
        assert max(abs(a - b) for a, b in zip(on_base, lora_lps, strict=True)) > 1e-2
        assert await unload_lora_adapter(client, "v1") == {}
        with pytest.raises(EngineRequestError, match="not loaded: v1"):
            await _greedy(client, "v1")
        with pytest.raises(EngineRequestError, match="not loaded"):
            await unload_lora_adapter(client, "v1")
