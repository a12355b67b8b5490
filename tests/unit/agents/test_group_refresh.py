"""A completed group's short trajectories that ended under an older version than its longest
one are run again before the batch sink sees the group.

Why it matters: a group completes with its longest trajectory; with partial rollout that one
spans versions up to the span limit while the short ones ended versions earlier. The sink
judges each trajectory by its end-token version, so the window moving past the short ones'
version drops the whole group, the one holding the long response (a bias toward short
responses, and the group's tokens wasted). The client here fakes the proxy boundary: it
records each session's response (its length and version) and hands the samples back as the
proxy's segment drain does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st

from dressage.agents.groups import GroupAgent, TrajectorySession, stale_short_members
from dressage.data.groups import Group, GroupFailed
from dressage.data.samples import Sample
from dressage.proxy.client import SamplingSettings


def _sample(session: str, length: int, version: str) -> Sample:
    return Sample.build(
        prompt_tokens=[1],
        response_tokens=[2] * length,
        response_versions=[version] * length,
        rollout_log_probs=[-0.1] * length,
        parent_traj_id=session,
    )


def _group(members: list[tuple[int, str]]) -> Group:
    return Group(
        group_id="g",
        samples=tuple(_sample(f"g-t{i}", n, v) for i, (n, v) in enumerate(members)),
    )


def test_short_members_of_an_older_version_than_the_longest_are_chosen() -> None:
    group = _group([(8, "v0"), (160, "v2"), (8, "v2"), (60, "v0"), (30, "v1")])
    assert stale_short_members(group, 0.25) == {"g-t0": 0, "g-t4": 4}
    assert stale_short_members(group, 0.5) == {"g-t0": 0, "g-t3": 3, "g-t4": 4}
    assert stale_short_members(group, 0.0) == {}


def test_a_single_version_group_is_left_alone() -> None:
    assert stale_short_members(_group([(8, "v0"), (160, "v0"), (4, "v0")]), 1.0) == {}


@given(
    st.lists(
        st.tuples(st.integers(1, 300), st.sampled_from(["v0", "v1", "v2"])),
        min_size=1,
        max_size=8,
    ),
    st.floats(0.0, 1.0),
)
def test_never_the_longest_nor_its_version_nor_a_long_one(
    members: list[tuple[int, str]], share: float
) -> None:
    chosen = stale_short_members(_group(members), share)
    longest = max(n for n, _ in members)
    newest = next(v for n, v in members if n == longest)  # the first longest, as max picks it
    for session, member in chosen.items():
        length, version = members[member]
        assert session == f"g-t{member}"
        assert version != newest
        assert length <= share * longest


@dataclass
class FakeProxy:
    """The proxy boundary: sessions' responses under the version live when they finish."""

    version: str = "v0"
    finished: dict[str, Sample] = field(default_factory=dict)
    discarded: list[str] = field(default_factory=list)

    async def finalize(self, session_id: str, reward: float, *, instance_id: str) -> None:
        return None

    async def discard(self, session_id: str, *, instance_id: str) -> None:
        self.discarded.append(session_id)
        self.finished.pop(session_id, None)

    async def segments(self, instance_id: str) -> list[Sample]:
        drained, self.finished = list(self.finished.values()), {}
        return drained


@dataclass(kw_only=True, eq=False)
class ScriptedAgent(GroupAgent[None]):
    """Member 0 is long and publishes `v1` before it ends; the others are short and end
    under `v0` first time, under the live version when run again."""

    proxy: FakeProxy
    fail_reruns: bool = False
    sessions: list[TrajectorySession] = field(default_factory=list)

    def prompt(self, index: int) -> None:
        return None

    async def trajectory(self, index: int, prompt: None, session: TrajectorySession) -> float:
        self.sessions.append(session)
        if session.session_id.endswith("-r") and self.fail_reruns:
            raise GroupFailed("partial_rollout_staleness_exceeded", staleness=True)
        rerun = session.session_id.endswith("-r")
        if session.member == 0:
            self.proxy.version = "v1"  # a publish while the long one generates
        version = self.proxy.version if session.member == 0 or rerun else "v0"
        length = 40 if session.member == 0 else 4
        self.proxy.finished[session.session_id] = _sample(session.session_id, length, version)
        return 1.0


def _agent(proxy: FakeProxy, **options: object) -> ScriptedAgent:
    return ScriptedAgent(
        client=proxy,  # type: ignore[arg-type]
        group_size=4,
        sampling=SamplingSettings(max_new_tokens=64),
        proxy=proxy,
        **options,  # type: ignore[arg-type]
    )


async def test_the_short_members_run_again_under_the_live_version() -> None:
    proxy = FakeProxy()
    agent = _agent(proxy)
    group = await agent(3, 0)
    by_session = {s.parent_traj_id: s for s in group.samples}
    assert sorted(by_session) == ["run-p3-a0-t0"] + [f"run-p3-a0-t{i}-r" for i in (1, 2, 3)]
    assert {s.dressage_end_token_version for s in group.samples} == {"v1"}
    # The first runs are no longer the group's, and are kept for the token ledger.
    assert sorted(s.parent_traj_id or "" for s in group.replaced) == [
        f"run-p3-a0-t{i}" for i in (1, 2, 3)
    ]
    # The reruns keep their member (a fixed-length task gives it the same length) and get
    # seeds of their own.
    reruns = [s for s in agent.sessions if s.session_id.endswith("-r")]
    assert sorted(s.member for s in reruns) == [1, 2, 3]
    first = {s.member: s.seed for s in agent.sessions if not s.session_id.endswith("-r")}
    assert all(s.seed != first[s.member] for s in reruns)


async def test_a_failed_rerun_keeps_the_group_as_it_completed() -> None:
    proxy = FakeProxy()
    group = await _agent(proxy, fail_reruns=True)(3, 0)
    assert sorted(s.parent_traj_id or "" for s in group.samples) == [
        f"run-p3-a0-t{i}" for i in range(4)
    ]
    assert sorted(proxy.discarded) == [f"run-p3-a0-t{i}-r" for i in (1, 2, 3)]
    assert group.replaced == ()


async def test_refresh_off_hands_the_group_over_as_it_completed() -> None:
    group = await _agent(FakeProxy(), refresh_share=0.0)(3, 0)
    assert {s.dressage_end_token_version for s in group.samples} == {"v0", "v1"}
