"""The generator at a weight update: resumed turns are sent before new ones, and the tokens it
received that no sample will hold are counted by reason (the token ledger's proxy side).

The engines are scripted answers at the HTTP boundary (`connections.request`); a reply may
wait on a future the test resolves, so a pause can land while a piece generates.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from dressage.proxy.engine_pool import EnginePool
from dressage.proxy.generation import RESTARTED, Generator, PauseGate
from dressage.proxy.sessions import Session
from dressage.proxy.span_rule import (
    PartialRolloutSpanLimit,
    PartialRolloutStalenessExceeded,
    SingleVersion,
    VersionRule,
)
from dressage.proxy.upstream import Reply

ABORT = {"type": "abort", "message": "Aborted by request."}
STOP = {"type": "stop"}


def answer(ids: list[int], version: str, finish: dict[str, Any]) -> bytes:
    meta = {
        "finish_reason": finish,
        "weight_version": version,
        "output_token_logprobs": [[-0.1, i, None] for i in ids],
    }
    return orjson.dumps({"text": "", "output_ids": ids, "meta_info": meta})


class Engine:
    """One engine's replies in order; a reply given as a future is awaited first."""

    def __init__(self, replies: list[bytes | asyncio.Future[bytes]]) -> None:
        self.replies = replies
        self.sent: list[list[int]] = []
        self.sending = asyncio.Event()
        """Set once a request was sent."""

    async def request(self, method: str, url: str, path: str, body: bytes = b"", **_: Any) -> Reply:
        self.sent.append(orjson.loads(body)["input_ids"])
        self.sending.set()
        reply = self.replies.pop(0)
        return Reply(200, await reply if isinstance(reply, asyncio.Future) else reply)


def generator(
    engine: Engine, gate: PauseGate, rule: VersionRule, lost: list[tuple[int, str, bool]]
) -> Generator:
    return Generator(
        connections=engine,  # type: ignore[arg-type]
        pool=EnginePool(["http://a"]),
        gate=gate,
        rule=rule,
        engine_timeout_s=5,
        pause_timeout_s=5,
        on_preempt=lambda: None,
        on_retry=lambda: None,
        on_tokens_lost=lambda tokens, reason, evaluation: lost.append((tokens, reason, evaluation)),
    )


async def test_a_resumed_turn_is_sent_before_a_new_turn_that_waited_longer() -> None:
    """The new turn waits at the gate first; at the continue the resumed one still goes first."""
    loop = asyncio.get_running_loop()
    first_piece: asyncio.Future[bytes] = loop.create_future()
    engine = Engine([first_piece, answer([12], "v1", STOP), answer([20], "v1", STOP)])
    gate = PauseGate()
    gen = generator(engine, gate, PartialRolloutSpanLimit(), [])
    resumed = asyncio.create_task(gen.run(Session("r", "g", 0.0, 0.0), [1], {}))
    await engine.sending.wait()  # its first piece generates
    gate.pause()
    fresh = asyncio.create_task(gen.run(Session("n", "g", 0.0, 0.0), [2], {}))
    for _ in range(5):
        await asyncio.sleep(0)  # the new turn now waits at the closed gate
    first_piece.set_result(answer([10, 11], "v0", ABORT))  # the pause aborts it
    for _ in range(5):
        await asyncio.sleep(0)  # the resumed turn waits at the gate, holding its place
    gate.resume()
    done = await asyncio.gather(resumed, fresh)
    assert engine.sent == [[1], [1, 10, 11], [2]]
    assert done[0].output_ids == [10, 11, 12]


async def test_a_new_turn_is_not_held_when_nothing_resumes() -> None:
    engine = Engine([answer([5], "v0", STOP)])
    gen = generator(engine, PauseGate(), PartialRolloutSpanLimit(), [])
    out = await asyncio.wait_for(gen.run(Session("n", None, 0.0, 0.0), [1], {}), 1.0)
    assert out.output_ids == [5]


async def test_a_turn_started_over_after_a_preempt_counts_its_tokens_as_restarted() -> None:
    """Without partial rollout, the aborted piece's tokens are thrown away and generated
    again: lost as `restarted` (an evaluation session's counted as evaluation)."""
    loop = asyncio.get_running_loop()
    first: asyncio.Future[bytes] = loop.create_future()
    engine = Engine([first, answer([7, 8, 9], "v1", STOP)])
    gate = PauseGate()
    lost: list[tuple[int, str, bool]] = []
    gen = generator(engine, gate, SingleVersion(), lost)
    turn = asyncio.create_task(gen.run(Session("s", "eval.j.v0-p0-a0", 0.0, 0.0), [1], {}))
    await engine.sending.wait()
    gate.pause()
    first.set_result(answer([4, 5], "v0", ABORT))
    for _ in range(5):
        await asyncio.sleep(0)
    gate.resume()
    out = await turn
    assert out.output_ids == [7, 8, 9]
    assert out.preempts == 1
    assert lost == [(2, RESTARTED, True)]


async def test_a_refused_turns_tokens_are_lost_under_the_refusals_name() -> None:
    """Span limit 0: the resumed piece under a second version is refused after it was
    generated (no target version announced), and the turn's three tokens are lost."""
    loop = asyncio.get_running_loop()
    first: asyncio.Future[bytes] = loop.create_future()
    engine = Engine([first, answer([3], "v1", STOP)])
    gate = PauseGate()
    lost: list[tuple[int, str, bool]] = []
    gen = generator(engine, gate, PartialRolloutSpanLimit(max_preempts=0), lost)
    turn = asyncio.create_task(gen.run(Session("s", "g", 0.0, 0.0), [1], {}))
    await engine.sending.wait()
    gate.pause()
    first.set_result(answer([1, 2], "v0", ABORT))
    for _ in range(5):
        await asyncio.sleep(0)
    gate.resume()
    with pytest.raises(PartialRolloutStalenessExceeded):
        await turn
    assert lost == [(3, "partial_rollout_staleness_exceeded", False)]
