"""Draining an engine: routing, how an abort is read, and a drained turn continuing on another
engine with its tokens (pure; the engines are scripted answers at the HTTP boundary)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from dressage.data.samples import DRAINED_SAMPLES, DRAINED_TOKENS, drained_token_stats
from dressage.proxy.drain import (
    LOST_AFTER_TOKENS,
    LOST_REGENERATED,
    Interruption,
    drain_answer,
    interruption,
)
from dressage.proxy.engine_pool import EnginePool
from dressage.proxy.errors import ProxyError
from dressage.proxy.generation import Generator, PauseGate
from dressage.proxy.records import record_to_sample, session_records
from dressage.proxy.sessions import Session
from dressage.proxy.span_rule import (
    PartialRolloutSpanLimit,
    PartialRolloutStalenessExceeded,
    SingleVersion,
    VersionRule,
)
from dressage.proxy.upstream import ConnectionLost, Reply

ABORT = {"type": "abort", "message": "Aborted by request."}


def test_a_draining_engine_takes_no_new_turn_and_loses_its_sticky_sessions() -> None:
    pool = EnginePool(["http://a", "http://b"])
    pool["http://b"].inflight = 7
    assert pool.pick("http://a").url == "http://a"
    assert pool.start_drain("http://a") is pool["http://a"]
    assert not pool.routable(pool["http://a"])
    assert pool.pick("http://a").url == "http://b"
    assert pool.pick().url == "http://b"
    assert [e["draining"] for e in pool.snapshot()] == [True, False]
    assert pool.start_drain("http://gone") is None


def test_with_every_other_engine_gone_a_drained_engine_is_named_as_draining() -> None:
    pool = EnginePool(["http://a", "http://b"])
    pool.target_version = "v1"
    for engine in pool.engines:
        engine.weight_version = "v1"
    pool.mark_down("http://b", "refused")
    pool.start_drain("http://a")
    with pytest.raises(ProxyError) as info:
        pool.pick()
    assert info.value.message == "no healthy inference engine is available"
    assert info.value.detail == {"engines": {"http://a": "draining", "http://b": "refused"}}


def test_draining_ends_when_the_engine_is_seen_down_or_undrained() -> None:
    pool = EnginePool(["http://a"])
    pool.start_drain("http://a")
    pool.mark_down("http://a", "health check failed")  # its process ended
    pool.mark_up("http://a")  # a replacement under the same URL
    assert pool.routable(pool["http://a"])
    pool.start_drain("http://a")
    pool.stop_drain("http://a")
    assert pool.routable(pool["http://a"])


@pytest.mark.parametrize(
    ("finish", "paused", "draining", "expected"),
    [
        (ABORT, True, False, Interruption.PAUSE),
        (ABORT, True, True, Interruption.PAUSE),
        (ABORT, False, True, Interruption.DRAIN),
        (ABORT, False, False, None),  # a client's own abort ends the turn
        ({"type": "length", "length": 4}, False, True, None),
        ({"type": "stop"}, True, True, None),
    ],
)
def test_an_abort_is_a_pause_a_drain_or_the_end_of_the_turn(
    finish: dict[str, Any], paused: bool, draining: bool, expected: Interruption | None
) -> None:
    assert interruption(finish, paused=paused, draining=draining) is expected


def test_a_drain_answers_once_nothing_is_in_flight_else_504_with_what_is_left() -> None:
    done = drain_answer("http://a", aborted=3, remaining=0, waited_s=0.25, timeout_s=20)
    assert done == {
        "url": "http://a",
        "draining": True,
        "drained": True,
        "aborted_generations": 3,
        "inflight": 0,
        "waited_s": 0.25,
    }
    with pytest.raises(ProxyError) as info:
        drain_answer("http://a", aborted=3, remaining=1, waited_s=20.0, timeout_s=20)
    assert (info.value.status, info.value.name) == (504, "drain_timeout")
    assert info.value.detail is not None
    assert info.value.detail["inflight"] == 1


def _answer(ids: list[int], version: str, finish: dict[str, Any]) -> bytes:
    meta = {
        "finish_reason": finish,
        "weight_version": version,
        "output_token_logprobs": [[-0.1, i, None] for i in ids],
    }
    return orjson.dumps({"text": "", "output_ids": ids, "meta_info": meta})


class _Engines:
    """The engines' HTTP side, scripted: each URL answers its queue of replies in order (an
    exception is raised as the transport's). `on_send` runs when a request is sent, before
    its answer (where a drain starts while the engine generates)."""

    def __init__(self, script: dict[str, list[bytes | Exception]], on_send: Any = None) -> None:
        self.script = script
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.on_send = on_send

    async def request(self, method: str, url: str, path: str, body: bytes = b"", **_: Any) -> Reply:
        self.sent.append((url, orjson.loads(body)))
        if self.on_send is not None:
            self.on_send(url)
        answer = self.script[url].pop(0)
        if isinstance(answer, Exception):
            raise answer
        return Reply(200, answer)


def _generator(
    engines: _Engines, pool: EnginePool, rule: VersionRule, counts: dict[str, list[str]]
) -> Generator:
    return Generator(
        connections=engines,  # type: ignore[arg-type]
        pool=pool,
        gate=PauseGate(),
        rule=rule,
        engine_timeout_s=5,
        pause_timeout_s=5,
        on_preempt=lambda: counts["preempts"].append("pause"),
        on_retry=lambda: counts["retries"].append("retry"),
        on_drained=counts["drained"].append,
        on_lost=counts["lost"].append,
    )


def _counts() -> dict[str, list[str]]:
    return {"preempts": [], "retries": [], "drained": [], "lost": []}


async def test_a_drained_turn_continues_on_another_engine_with_its_tokens() -> None:
    pool = EnginePool(["http://a", "http://b"])
    engines = _Engines(
        {
            "http://a": [_answer([10, 11, 12], "va", ABORT)],
            "http://b": [_answer([13, 14], "vb", {"type": "length", "length": 2})],
        },
        on_send=lambda url: pool.start_drain("http://a") if url == "http://a" else None,
    )
    counts = _counts()
    session = Session("s", None, 0.0, 0.0)
    params = {"max_new_tokens": 5, "min_new_tokens": 4}
    gen = await _generator(engines, pool, PartialRolloutSpanLimit(), counts).run(
        session, [1, 2], params
    )
    assert gen.output_ids == [10, 11, 12, 13, 14]
    assert gen.versions == ["va", "va", "va", "vb", "vb"]
    assert gen.preempts == 1
    assert gen.finish_reason == {"type": "length", "length": 5}
    (first_url, _first), (second_url, second) = engines.sent
    assert (first_url, second_url) == ("http://a", "http://b")
    assert second["input_ids"] == [1, 2, 10, 11, 12]
    assert second["sampling_params"] == {"max_new_tokens": 2, "min_new_tokens": 1}
    assert counts == {"preempts": [], "retries": [], "drained": ["http://a"], "lost": []}
    assert session.engine_url == "http://b"
    # The three tokens the drained engine made are the turn's drained tokens.
    assert gen.drained_tokens == 3


async def test_a_drained_turns_kept_tokens_reach_its_record_and_sample() -> None:
    pool = EnginePool(["http://a", "http://b"])
    engines = _Engines(
        {
            "http://a": [_answer([10, 11], "va", ABORT)],
            "http://b": [_answer([12], "vb", {"type": "stop"})],
        },
        on_send=lambda url: pool.start_drain("http://a") if url == "http://a" else None,
    )
    kept: list[tuple[str, int]] = []
    generator = _generator(engines, pool, PartialRolloutSpanLimit(), _counts())
    generator.on_drained_tokens = lambda url, tokens: kept.append((url, tokens))
    session = Session("s", "g", 0.0, 0.0)
    plan = session.begin_turn([1, 2], 0.0)
    gen = await generator.run(session, [1, 2], {"max_new_tokens": 4})
    session.commit_turn(
        plan, gen.output_ids, gen.logprobs, gen.versions, 1.0, drained_tokens=gen.drained_tokens
    )
    assert kept == [("http://a", 2)]
    (record,) = session_records(session, reward=1.0, record_token_versions=True)
    assert record["drained_tokens"] == 2
    sample = record_to_sample(record)
    assert sample.metadata["drained_tokens"] == 2
    assert drained_token_stats([sample]) == {DRAINED_TOKENS: 2.0, DRAINED_SAMPLES: 1.0}


async def test_without_partial_rollout_a_drained_turn_keeps_no_drained_tokens() -> None:
    pool = EnginePool(["http://a", "http://b"])
    engines = _Engines(
        {
            "http://a": [_answer([10, 11], "v1", ABORT)],
            "http://b": [_answer([20], "v1", {"type": "stop"})],
        },
        on_send=lambda url: pool.start_drain("http://a") if url == "http://a" else None,
    )
    kept: list[tuple[str, int]] = []
    generator = _generator(engines, pool, SingleVersion(), _counts())
    generator.on_drained_tokens = lambda url, tokens: kept.append((url, tokens))
    gen = await generator.run(Session("s", None, 0.0, 0.0), [1], {"max_new_tokens": 4})
    assert (gen.output_ids, gen.drained_tokens, kept) == ([20], 0, [])


async def test_the_preempt_limit_applies_to_a_drained_turn() -> None:
    pool = EnginePool(["http://a", "http://b"])
    engines = _Engines(
        {
            "http://a": [_answer([10], "va", ABORT)],
            "http://b": [_answer([11], "vb", {"type": "stop"})],
        },
        on_send=lambda url: pool.start_drain("http://a") if url == "http://a" else None,
    )
    rule = PartialRolloutSpanLimit(max_preempts=0)
    with pytest.raises(PartialRolloutStalenessExceeded):
        await _generator(engines, pool, rule, _counts()).run(
            Session("s", None, 0.0, 0.0), [1], {"max_new_tokens": 4}
        )


async def test_without_partial_rollout_a_drained_turn_starts_over_on_another_engine() -> None:
    pool = EnginePool(["http://a", "http://b"])
    engines = _Engines(
        {
            "http://a": [_answer([10, 11], "v1", ABORT)],
            "http://b": [_answer([20, 21, 22], "v1", {"type": "stop"})],
        },
        on_send=lambda url: pool.start_drain("http://a") if url == "http://a" else None,
    )
    gen = await _generator(engines, pool, SingleVersion(), _counts()).run(
        Session("s", None, 0.0, 0.0), [1], {"max_new_tokens": 4}
    )
    assert gen.output_ids == [20, 21, 22]
    assert gen.preempts == 1
    assert engines.sent[1][1]["input_ids"] == [1]


async def test_a_crash_retries_an_untouched_turn_and_loses_a_resumed_one_counting_both() -> None:
    pool = EnginePool(["http://a", "http://b", "http://c"])
    crash = ConnectionLost("the engine closed the connection before its reply")
    engines = _Engines(
        {
            "http://a": [crash],
            "http://b": [_answer([5, 6], "v1", ABORT)],
            "http://c": [crash],
        },
        on_send=lambda url: pool.start_drain("http://b") if url == "http://b" else None,
    )
    counts = _counts()
    with pytest.raises(ProxyError) as info:
        await _generator(engines, pool, PartialRolloutSpanLimit(), counts).run(
            Session("s", None, 0.0, 0.0), [1], {"max_new_tokens": 4}
        )
    # a died before any token (sent on to b); b was drained after two tokens; c died after
    # the turn had those two: that is the rollout's to retry.
    assert [url for url, _ in engines.sent] == ["http://a", "http://b", "http://c"]
    assert (info.value.status, info.value.name) == (502, "engine_failed")
    assert info.value.detail is not None
    assert info.value.detail["received_tokens"] == 2
    assert counts["lost"] == [LOST_REGENERATED, LOST_AFTER_TOKENS]
    assert counts["retries"] == ["retry"]


async def test_a_moved_turn_that_then_fails_counts_its_drained_tokens_as_lost() -> None:
    pool = EnginePool(["http://b", "http://c"])
    crash = ConnectionLost("the engine closed the connection before its reply")
    engines = _Engines(
        {"http://b": [_answer([5, 6], "v1", ABORT)], "http://c": [crash]},
        on_send=lambda url: pool.start_drain("http://b") if url == "http://b" else None,
    )
    lost: list[tuple[int, str]] = []
    generator = _generator(engines, pool, PartialRolloutSpanLimit(), _counts())
    generator.on_drained_tokens_lost = lambda tokens, reason: lost.append((tokens, reason))
    with pytest.raises(ProxyError):
        await generator.run(Session("s", None, 0.0, 0.0), [1], {"max_new_tokens": 4})
    assert lost == [(2, "engine_failed")]


async def test_a_moved_turn_the_version_rule_refuses_counts_its_drained_tokens_as_lost() -> None:
    pool = EnginePool(["http://a", "http://b"])
    engines = _Engines(
        {
            "http://a": [_answer([10], "va", ABORT)],
            "http://b": [_answer([11], "vb", {"type": "stop"})],
        },
        on_send=lambda url: pool.start_drain("http://a") if url == "http://a" else None,
    )
    lost: list[tuple[int, str]] = []
    generator = _generator(engines, pool, PartialRolloutSpanLimit(max_preempts=0), _counts())
    generator.on_drained_tokens_lost = lambda tokens, reason: lost.append((tokens, reason))
    with pytest.raises(PartialRolloutStalenessExceeded):
        await generator.run(Session("s", None, 0.0, 0.0), [1], {"max_new_tokens": 4})
    assert lost == [(1, "partial_rollout_staleness_exceeded")]
