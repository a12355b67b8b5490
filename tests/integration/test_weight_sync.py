"""Distributed weight sync over gloo: the trainer's `DistributedWeightSender` (rank 0) and a
real embedded-engine process (rank 1), on loopback, for every SGLang release the engine plays:
0.5.2 (one broadcast per tensor, no sessions) and 0.5.23 (inside `/begin_weight_update` ...
`/end_weight_update`, flattened buckets)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import torch
from dressage_testkit.engine import EngineProcess, start_engine
from dressage_testkit.trainer import small_model
from transformers import LlamaForCausalLM

from dressage.engine import EngineClient, EngineRequestError, GenerateRequest, SamplingParams
from dressage.engine.embedded.release_profiles import ReleaseProfile
from dressage.engine.weight_group import THREAD_NAME
from dressage.weights.broadcast import DistributedWeightSender, WeightSyncError

pytestmark = pytest.mark.integration
torch.set_num_threads(1)

PROMPT = [5, 11, 17, 23, 29, 2, 6]
TIMEOUT_S = 60.0
"""Bound on the group's rendezvous and broadcasts: a hang fails the test instead of blocking."""


@pytest.fixture
def engine(tmp_path: Path, engine_release: str) -> Iterator[EngineProcess]:
    served = small_model(tmp_path / "served", seed=0)
    with start_engine(
        model=str(served), weight_version="v0", sglang_release=engine_release
    ) as process:
        yield process


@pytest.fixture
def trainer_model(tmp_path: Path) -> LlamaForCausalLM:
    """The trainer's model: same architecture as the served one, different weights."""
    model = LlamaForCausalLM.from_pretrained(small_model(tmp_path / "trained", seed=1))
    return model.eval()


@pytest.fixture
async def sender(engine: EngineProcess) -> AsyncIterator[DistributedWeightSender]:
    sync = DistributedWeightSender(
        [engine.base_url],
        master_address="127.0.0.1",
        backend="gloo",
        bucket_bytes=16 * 1024,
        timeout_s=TIMEOUT_S,
    )
    await sync.init_group()
    try:
        yield sync
    finally:
        await sync.destroy_group()
        await sync.aclose()


async def engine_logprobs(base_url: str) -> tuple[list[int], list[float]]:
    """The engine's greedy continuation of PROMPT and each token's logprob."""
    params = SamplingParams(max_new_tokens=6, temperature=0.0, ignore_eos=True)
    async with EngineClient(base_url) as client:
        response = await client.generate(
            GenerateRequest(input_ids=PROMPT, sampling_params=params, return_logprob=True)
        )
    return response.output_ids, response.output_logprobs()


def model_logprobs(model: LlamaForCausalLM, output: list[int]) -> list[float]:
    """`model`'s logprob of each of `output` after PROMPT."""
    ids = torch.tensor([PROMPT + output])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    start = len(PROMPT) - 1
    return [float(logprobs[start + i, token]) for i, token in enumerate(output)]


async def test_a_publish_gives_the_engine_the_trainers_weights_and_version(
    engine: EngineProcess,
    engine_profile: ReleaseProfile,
    sender: DistributedWeightSender,
    trainer_model: LlamaForCausalLM,
) -> None:
    before_ids, before = await engine_logprobs(engine.base_url)
    assert before != pytest.approx(model_logprobs(trainer_model, before_ids), abs=1e-3)

    state = trainer_model.state_dict()
    report = await sender.send(iter(state.items()), "v1")

    assert report.tensors == len(state)
    assert report.buckets > 1  # 16 KiB buckets: the model is several
    assert report.flattened is engine_profile.flattened_bucket
    output, logprobs = await engine_logprobs(engine.base_url)
    assert logprobs == pytest.approx(model_logprobs(trainer_model, output), abs=1e-4)
    async with EngineClient(engine.base_url) as client:
        assert await client.get_weight_version() == "v1"


async def test_bad_buckets_are_refused_naming_the_parameter_and_change_nothing(
    engine: EngineProcess, sender: DistributedWeightSender, trainer_model: LlamaForCausalLM
) -> None:
    before = await engine_logprobs(engine.base_url)
    hidden = trainer_model.config.hidden_size

    with pytest.raises(WeightSyncError, match=r"model\.layers\.7\.mlp\.up_proj\.weight"):
        await sender.send([("model.layers.7.mlp.up_proj.weight", torch.zeros(4, 4))], "bad-1")
    with pytest.raises(WeightSyncError, match=r"model\.norm\.weight has shape \[32\]"):
        await sender.send(
            [
                ("model.layers.0.input_layernorm.weight", torch.zeros(hidden)),
                ("model.norm.weight", torch.zeros(hidden + 1)),
            ],
            "bad-2",
        )

    assert await engine_logprobs(engine.base_url) == before
    async with EngineClient(engine.base_url) as client:
        assert await client.get_weight_version() == "v0"
    # The refused buckets were drained: the group is still in step and a publish works.
    await sender.send(iter(trainer_model.state_dict().items()), "v1")
    output, logprobs = await engine_logprobs(engine.base_url)
    assert logprobs == pytest.approx(model_logprobs(trainer_model, output), abs=1e-4)


async def test_requests_without_a_group_or_for_nccl_are_refused(
    engine: EngineProcess, engine_profile: ReleaseProfile
) -> None:
    async with httpx.AsyncClient(base_url=engine.base_url, timeout=30) as client:
        if engine_profile.weight_update_sessions:
            # The release checks the session first.
            assert (await client.post("/begin_weight_update", json={})).status_code == 200
        no_group = await client.post(
            "/update_weights_from_distributed",
            json={"names": ["model.norm.weight"], "dtypes": ["float32"], "shapes": [[32]]},
        )
        nccl = await client.post(
            "/init_weights_update_group",
            json={
                "master_address": "127.0.0.1",
                "master_port": 29500,
                "rank_offset": 1,
                "world_size": 2,
            },
        )
        mismatched = await client.post(
            "/update_weights_from_distributed",
            json={"names": ["model.norm.weight"], "dtypes": [], "shapes": [[32]]},
        )
    assert no_group.status_code == 400
    assert no_group.json()["success"] is False
    assert "group_name: no weight-update group 'weight_update_group'" in no_group.json()["message"]
    assert nccl.status_code == 400
    assert "backend:" in nccl.json()["error"]["message"]
    assert mismatched.status_code == 400
    assert "dtypes: 0 entries for 1 names" in mismatched.json()["error"]["message"]


async def test_after_destroy_the_engine_has_left_the_group(
    engine: EngineProcess,
    engine_profile: ReleaseProfile,
    sender: DistributedWeightSender,
    trainer_model: LlamaForCausalLM,
) -> None:
    if ("POST", "/destroy_weights_update_group") not in engine_profile.routes:
        pytest.skip(f"SGLang {engine_profile.release} has no /destroy_weights_update_group")
    await sender.destroy_group()
    assert not sender.ready
    with pytest.raises(WeightSyncError, match="call init_group first"):
        await sender.send(iter(trainer_model.state_dict().items()), "v1")
    async with EngineClient(engine.base_url) as client:
        await client.begin_weight_update()
        with pytest.raises(EngineRequestError, match="no weight-update group"):
            await client.update_weights_from_distributed(["model.norm.weight"], ["float32"], [[32]])
        await client.end_weight_update()
    # A new group forms on the same engine and publishes.
    await sender.init_group()
    await sender.send(iter(trainer_model.state_dict().items()), "v2")
    async with EngineClient(engine.base_url) as client:
        assert await client.get_weight_version() == "v2"


async def test_per_tensor_and_flattened_buckets_load_the_same_weights(
    engine: EngineProcess,
    engine_profile: ReleaseProfile,
    sender: DistributedWeightSender,
    trainer_model: LlamaForCausalLM,
) -> None:
    """On a release with flattened buckets both forms load the trainer's weights; a session
    a dead sender left open is closed before the next publish opens its own."""
    if not engine_profile.flattened_bucket:
        pytest.skip(f"SGLang {engine_profile.release} has no flattened buckets")
    state = trainer_model.state_dict()
    async with httpx.AsyncClient(base_url=engine.base_url, timeout=30) as http:
        opened = await http.post("/begin_weight_update", json={})
        assert opened.json()["success"] is True  # left open, as by a sender that died
    per_tensor = await sender.send(iter(state.items()), "v1", flattened=False)
    output, logprobs = await engine_logprobs(engine.base_url)
    assert logprobs == pytest.approx(model_logprobs(trainer_model, output), abs=1e-4)
    flat = await sender.send(iter(state.items()), "v2", flattened=True)
    assert await engine_logprobs(engine.base_url) == (output, logprobs)
    assert (per_tensor.flattened, flat.flattened) == (False, True)
    assert per_tensor.bytes == flat.bytes
    async with EngineClient(engine.base_url) as client:
        assert await client.get_weight_version() == "v2"


async def test_an_engine_that_cannot_join_fails_the_group_at_once(engine: EngineProcess) -> None:
    absent = "http://127.0.0.1:9"  # the discard port: nothing listens there
    sync = DistributedWeightSender(
        [engine.base_url, absent], master_address="127.0.0.1", backend="gloo", timeout_s=300
    )
    try:
        start = asyncio.get_running_loop().time()
        with pytest.raises(WeightSyncError, match=r"127\.0\.0\.1:9"):
            await sync.init_group()
        # Well before the 300 s rendezvous timeout that waiting for the absent rank would take.
        assert asyncio.get_running_loop().time() - start < 60
        assert not sync.ready
    finally:
        await sync.aclose()


async def test_a_group_that_cannot_form_stops_its_store_so_rank_0_waits_no_longer() -> None:
    """Rank 0's rendezvous runs in a thread nothing can interrupt; the sender stops the store
    it serves when the group cannot form, which fails that wait (and any engine's) at once
    instead of at the 300 s timeout, so no thread is left waiting for a rank that never
    comes (the suite's `no_rendezvous_outlives_its_test` checks every test for that)."""
    before = set(threading.enumerate())
    sync = DistributedWeightSender(
        ["http://127.0.0.1:9"], master_address="127.0.0.1", backend="gloo", timeout_s=300
    )
    with pytest.raises(WeightSyncError, match=r"127\.0\.0\.1:9"):
        await sync.init_group()
    (rendezvous,) = [
        t for t in threading.enumerate() if t.name == THREAD_NAME and t not in before
    ]
    await asyncio.to_thread(rendezvous.join, 60)
    assert not rendezvous.is_alive()
    await sync.aclose()


async def test_a_group_name_the_engine_holds_is_refused_and_its_group_kept(
    engine: EngineProcess, sender: DistributedWeightSender, trainer_model: LlamaForCausalLM
) -> None:
    """As both releases do (`init_custom_process_group` -> torch's `_new_process_group_helper`:
    "The specified group name has already been created"): the held group keeps working."""
    async with httpx.AsyncClient(base_url=engine.base_url, timeout=30) as http:
        again = await http.post(
            "/init_weights_update_group",
            json={
                "master_address": "127.0.0.1",
                "master_port": sender.port,
                "rank_offset": 1,
                "world_size": 2,
                "group_name": sender.group_name,
                "backend": "gloo",
            },
        )
    assert again.status_code == 400
    assert again.json() == {
        "success": False,
        "message": "Failed to initialize custom process group: The specified group name has "
        "already been created, please use a different group name.",
    }
    await sender.send(iter(trainer_model.state_dict().items()), "v1")
    output, logprobs = await engine_logprobs(engine.base_url)
    assert logprobs == pytest.approx(model_logprobs(trainer_model, output), abs=1e-4)
