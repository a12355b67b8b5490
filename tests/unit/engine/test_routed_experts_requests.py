"""What the embedded engine refuses about `return_routed_experts`, before any generation:
requests are driven through the engine's ASGI app in this process (no port, no weights
loaded; validation answers before the readiness check)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from dressage.api.sglang import SGLANG_NEWEST_TESTED, SGLANG_OLDEST_TESTED
from dressage.engine.embedded.server import EngineConfig, EngineServer
from dressage.engine.sglang_support import ROUTED_EXPERTS, supports
from dressage.model import build_tiny_model, build_tiny_moe_model


async def _post(server: EngineServer, body: dict[str, Any]) -> httpx.Response:
    transport = httpx.ASGITransport(app=server.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://engine") as client:
        return await client.post("/generate", json=body)


def _server(path: Path, release: str = SGLANG_NEWEST_TESTED) -> EngineServer:
    return EngineServer(
        EngineConfig(model_source=str(path), model_path=path, sglang_release=release)
    )


@pytest.fixture(scope="module")
def moe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_moe_model(tmp_path_factory.mktemp("moe"))


BODY = {"input_ids": [5, 6, 7], "return_routed_experts": True}


async def test_a_release_without_the_field_refuses_it_as_unknown(moe: Path) -> None:
    """0.5.2 has neither field (both arrive later: `return_routed_experts` in 0.5.7, the start
    offset in 0.5.19); 0.5.23 has both."""
    assert not supports(SGLANG_OLDEST_TESTED, ROUTED_EXPERTS)
    older = _server(moe, release=SGLANG_OLDEST_TESTED)
    for field, body in (
        ("return_routed_experts", BODY),
        ("routed_experts_start_len", {"input_ids": [5, 6, 7], "routed_experts_start_len": 0}),
    ):
        answer = await _post(older, body)
        assert answer.status_code == 400
        assert answer.json()["error"]["message"] == f"{field}: Extra inputs are not permitted"
    # A release that has them validates the request and goes on (503: no weights loaded here).
    newest = _server(moe)
    assert (await _post(newest, BODY)).status_code == 503
    assert (await _post(newest, {**BODY, "routed_experts_start_len": 0})).status_code == 503


async def test_a_dense_model_has_no_experts_to_return(tmp_path: Path) -> None:
    answer = await _post(_server(build_tiny_model(tmp_path)), BODY)
    assert answer.status_code == 400
    assert (
        "the served model (LlamaForCausalLM) has no MoE layers" in answer.json()["error"]["message"]
    )


async def test_start_len_must_lie_within_the_prompt(moe: Path) -> None:
    answer = await _post(_server(moe), {**BODY, "routed_experts_start_len": 4})
    assert answer.status_code == 400
    message = answer.json()["error"]["message"]
    assert message == "routed_experts_start_len: 4 is higher than the number of input tokens 3"
    negative = await _post(_server(moe), {**BODY, "routed_experts_start_len": -1})
    assert negative.status_code == 400
    assert negative.json()["error"]["message"].startswith("routed_experts_start_len:")
