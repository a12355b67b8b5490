"""The embedded engine refuses `sampling_params` the way SGLang does, with the same HTTP status.

For each body, SGLang's own `SamplingParams(**params)` then `verify` (`sampling/
sampling_params.py`, v0.5.2) decide: accepted, `ValueError` (the `/generate` handler in
`entrypoints/http_server.py` answers 400 `{"error": {"message"}}`), or `TypeError` (not caught
there: HTTP 500). The real embedded engine process must answer 200, 400 and 500 alike, and its
`/get_server_info` reports the SGLang release whose API it serves.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dressage.engine import EngineClient
from dressage.engine.sglang_support import EMBEDDED_ENGINE_SGLANG_VERSION
from dressage.engine.testing import EngineProcess, start_engine
from dressage.model import BUILTIN_TINY, resolve_model_source

pytest.importorskip(
    "sglang", reason="SGLang's pure-Python parts are not installed: run scripts/setup.sh"
)

pytestmark = [pytest.mark.contract, pytest.mark.integration]

CASES: list[dict[str, Any]] = [
    {"max_new_tokens": 2},
    {"max_new_tokens": 2, "temperature": 0},
    {"max_new_tokens": 2, "temperature": -1.0},
    {"max_new_tokens": 2, "top_p": 1.5},
    {"max_new_tokens": 2, "top_k": 0},
    {"max_new_tokens": 2, "temperatur": 0.5},
    {"max_new_tokens": 2, "temperature": "0.5"},
    {"max_new_tokens": 2, "top_k": None},
]


def _sglang_status(params: dict[str, Any]) -> int:
    from sglang.srt.sampling.sampling_params import SamplingParams

    try:
        sp = SamplingParams(**params)
        sp.normalize(None)
        sp.verify(vocab_size=1 << 16)
    except TypeError:
        return 500
    except ValueError:
        return 400
    return 200


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    cache: Path = tmp_path_factory.mktemp("engine-cache")
    resolve_model_source(BUILTIN_TINY, cache)
    with start_engine(cache_dir=cache) as process:
        yield process


@pytest.mark.parametrize("params", CASES, ids=[str(sorted(c.items())) for c in CASES])
async def test_sampling_params_get_sglangs_status(
    engine: EngineProcess, params: dict[str, Any]
) -> None:
    expected = _sglang_status(params)
    async with httpx.AsyncClient(timeout=60) as client:
        answer = await client.post(
            engine.base_url + "/generate", json={"input_ids": [1, 2], "sampling_params": params}
        )
    assert answer.status_code == expected, answer.text
    if expected != 200:
        field = next(k for k in params if k != "max_new_tokens")
        assert field in answer.json()["error"]["message"]


async def test_the_engine_reports_the_release_it_serves(engine: EngineProcess) -> None:
    async with EngineClient(engine.base_url) as client:
        assert await client.sglang_version() == EMBEDDED_ENGINE_SGLANG_VERSION


async def test_a_request_past_the_queue_limit_gets_sglangs_503(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """`--max-queued-requests` as SGLang's: with the one slot busy and no room to wait, the
    next request is turned away with the body SGLang's own `ErrorResponse` renders
    (`entrypoints/http_server.py`'s `HTTPException` handler, v0.5.2), and served again once
    the slot is free."""
    from sglang.srt.entrypoints.openai.protocol import ErrorResponse

    expected = ErrorResponse(
        object="error", message="The request queue is full.", type="503", code=503
    ).model_dump()
    cache: Path = tmp_path_factory.mktemp("queue-cache")
    resolve_model_source(BUILTIN_TINY, cache)
    limits = ["--max-queued-requests", "0"]
    body = {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 30, "ignore_eos": True}}
    with start_engine(
        cache_dir=cache, max_batch_size=1, min_step_interval_ms=50, extra_args=limits
    ) as engine:
        async with httpx.AsyncClient(base_url=engine.base_url, timeout=60) as client:
            async with client.stream("POST", "/generate", json={**body, "stream": True}) as long:
                assert long.status_code == 200
                lines = long.aiter_lines()
                await anext(lines)  # the first chunk: the request holds the only slot
                refused = await client.post("/generate", json=body)
                async for _ in lines:
                    pass
            served = await client.post("/generate", json=body)
    assert refused.status_code == 503
    assert refused.json() == expected
    assert served.status_code == 200, served.text
