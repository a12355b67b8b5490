"""`return_routed_experts` against SGLang's own code at the installed release.

Upstream: the field arrives in v0.5.7 (`managers/io_struct.py`
`GenerateReqInput.return_routed_experts`, `layers/moe/routed_experts_capturer.py`); v0.5.8
adds `routed_experts_start_len`; at v0.5.23 the capturer is `state_capturer/routed_experts.py`,
whose `extract_routed_experts_from_meta_info` decodes `meta_info.routed_experts` (base64 of
int32, `np.frombuffer`). A release without the field would drop it silently (FastAPI builds the
dataclass from known fields), so the client refuses to send it there instead of waiting for
routes that never come.
"""

from __future__ import annotations

import base64

import numpy as np
import pytest

from dressage.data.expert_routing import RoutedExperts
from dressage.engine import EngineClient, EngineVersionError
from dressage.engine.protocol import GenerateRequest, GenerateResponse
from dressage.engine.sglang_support import ROUTED_EXPERTS, ROUTED_EXPERTS_START_LEN, supports
from tests.contract.support import SGLANG_VERSION, check_generate_body, fake_sglang

pytestmark = pytest.mark.contract


def test_the_release_table_matches_the_installed_dataclass() -> None:
    from sglang.srt.managers.io_struct import GenerateReqInput

    fields = GenerateReqInput.__dataclass_fields__
    assert ("return_routed_experts" in fields) is supports(SGLANG_VERSION, ROUTED_EXPERTS)
    start = supports(SGLANG_VERSION, ROUTED_EXPERTS_START_LEN)
    assert ("routed_experts_start_len" in fields) is start


async def test_a_routed_generate_is_sent_only_to_a_release_that_has_the_field() -> None:
    req = GenerateRequest(input_ids=[1, 2, 3], return_routed_experts=True)
    with fake_sglang() as fake:
        async with EngineClient(fake.url) as client:
            if supports(SGLANG_VERSION, ROUTED_EXPERTS):
                await client.generate(req)
                [body] = fake.posted("/generate")
                assert body["return_routed_experts"] is True
                check_generate_body(body)
            else:
                with pytest.raises(
                    EngineVersionError, match=r"return_routed_experts needs SGLang >= 0\.5\.7"
                ):
                    await client.generate(req)
                assert fake.posted("/generate") == []


def test_our_decoding_is_sglangs() -> None:
    """What the embedded engine and `RoutedExperts` produce decodes with SGLang's own helper
    to the same experts (0.5.23; older releases have no such helper)."""
    routed = pytest.importorskip("sglang.srt.state_capturer.routed_experts")
    experts = np.arange(7 * 2 * 2, dtype=np.int32).reshape(7, 2, 2) % 8
    ours = RoutedExperts(experts.astype("<i4").tobytes(), 7, 4).to_base64()
    assert ours == base64.b64encode(experts.tobytes()).decode()
    meta = {"id": "r", "prompt_tokens": 5, "routed_experts": ours}
    theirs = routed.extract_routed_experts_from_meta_info({"meta_info": meta})
    assert theirs.tolist() == experts.flatten().tolist()
    response = GenerateResponse.model_validate(
        {"text": "", "output_ids": [1, 2, 3], "meta_info": meta}
    )
    decoded = response.routed_experts()
    assert decoded is not None
    assert decoded.values() == theirs.tolist()


@pytest.mark.parametrize("release", [SGLANG_VERSION, "0.5.6", "0.5.7"])
async def test_the_proxy_asks_exactly_the_releases_that_have_the_field(release: str) -> None:
    """With `record_routed_experts` the proxy adds `return_routed_experts` for an engine whose
    release has it and leaves it out for an older one (which would ignore it); the routes of
    the answer land in the segment record. (The installed release's classes check the body
    only for that release; another release's answer is scripted.)"""
    from tests.contract.proxy_harness import engine_release_known, running_proxy
    from tests.contract.support import finish_length, generate_answer

    body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}}
    routes = np.arange(4 * 4, dtype=np.int32).reshape(4, 4)
    answer = generate_answer({**body, "return_logprob": True}, [5, 6], finish_length(2))
    if supports(release, ROUTED_EXPERTS):
        answer["meta_info"]["routed_experts"] = base64.b64encode(routes.tobytes()).decode()
    headers = {"X-Session-Id": "s-1", "X-Instance-Id": "g"}
    with fake_sglang(version=release) as fake:
        fake.answers.append((200, answer))
        async with running_proxy(
            fake.url, health_interval_s=0.05, record_routed_experts=True
        ) as proxy:
            assert await engine_release_known(proxy) == release
            reply = await proxy.post("/generate", json=body, headers=headers)
            assert reply.status_code == 200, reply.text
            assert (await proxy.post("/sessions/s-1/finalize", json={})).status_code == 200
            (record,) = (await proxy.get("/segments")).json()["segments"]
        (sent,) = fake.posted("/generate")
    if release == SGLANG_VERSION:
        check_generate_body(sent)
    has = supports(release, ROUTED_EXPERTS)
    assert ("return_routed_experts" in sent) is has
    if has:
        assert record["routed_experts_rows"] == 4
        assert record["routed_experts"] == answer["meta_info"]["routed_experts"]
    else:
        assert record["routed_experts"] is None


def test_the_operators_flag_is_the_releases() -> None:
    """`--enable-return-routed-experts` parses with the installed release's own parser exactly
    when the release has the feature (`server_args.py` at 0.5.7; a field of
    `arg_groups/fields/exec_.py` at 0.5.23)."""
    import argparse

    from sglang.srt.server_args import ServerArgs

    class Refused(Exception):
        pass

    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> None:  # type: ignore[override]
            raise Refused(message)

    parser = Parser()
    ServerArgs.add_cli_args(parser)
    argv = ["--model-path", "/m", "--enable-return-routed-experts"]
    if supports(SGLANG_VERSION, ROUTED_EXPERTS):
        assert parser.parse_args(argv).enable_return_routed_experts is True
    else:
        with pytest.raises(Refused, match="enable-return-routed-experts"):
            parser.parse_args(argv)
