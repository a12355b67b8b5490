"""The whitebox agent: our own multi-turn loop between the policy and an environment.

Each trajectory plays one episode of the environment through the rollout proxy's token-level
`POST /generate`, one proxy session per trajectory. A turn sends the whole conversation so far
as token ids; the proxy finds that they extend the session's segment exactly, records the
observation tokens with loss mask 0 and the generated tokens with their logprobs and per-token
versions. The decoded reply is the action; the environment's answer is appended as a tool
message and the loop goes on until the episode is done or the turn limit is reached. The
trajectory's reward is the sum of its step rewards, given to the proxy when the session is
finalized; the group's samples are read back from the proxy like every other rollout's.

A turn refused by the proxy (a version change without partial rollout, or the partial-rollout
span limit) fails the trajectory and so the group, which the collector retries whole. So does an
environment whose `episode()` or `step()` raises: the failure is `environment_raised`, a
`UserCodeFailed` naming the environment's class, the exception and the line that raised it.
Under `spec.task.onRewardError: drop`, a failure that is the infrastructure's
(`dressage.tasks.infrastructure`: a timeout, an unreachable service, a crashed sandbox) drops
the group at once instead, counted as `environment_error`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dressage.agents.groups import GroupAgent, TrajectorySession
from dressage.tasks.base import Environment, Episode, Step
from dressage.tasks.codec import Conversation, PromptCodec
from dressage.tasks.faults import (
    ENVIRONMENT_FIELD,
    ENVIRONMENT_RAISED,
    UserCodeFailed,
    UserCodeFaults,
    fault_from_exception,
)
from dressage.tasks.infrastructure import DROP_SETTING, ENVIRONMENT_ERROR, is_infrastructure


@dataclass(kw_only=True, eq=False)
class WhiteboxAgentRollout(GroupAgent[None]):
    """One prompt group of a multi-turn environment: `(prompt index, attempt) -> Group`."""

    environment: Environment
    codec: PromptCodec
    faults: UserCodeFaults = field(default_factory=UserCodeFaults)
    """Where the environment's failures are recorded (the run's registry)."""
    drop_infrastructure_errors: bool = False
    """Drop the group at once when the environment fails for the infrastructure's reason
    (`spec.task.onRewardError: drop`) instead of leaving it to the retry policy."""

    def prompt(self, index: int) -> None:
        return None  # each trajectory starts its own episode of instance `index`

    async def trajectory(self, index: int, prompt: None, session: TrajectorySession) -> float:
        return await self.play(
            index, session_id=session.session_id, instance_id=session.group_id, seed=session.seed
        )

    async def play(self, index: int, *, session_id: str, instance_id: str, seed: int) -> float:
        """Play one episode of instance `index` in proxy session `session_id`; its reward.

        Turn `t` samples with seed `seed + t`, so a trajectory is reproducible on one engine.
        """
        episode = self._episode(index)
        conversation = Conversation(self.codec, episode.prompt)
        reward = 0.0
        for turn in range(self.environment.max_turns):
            output = await self.client.generate(
                conversation.ids,
                self.sampling,
                session_id=session_id,
                instance_id=instance_id,
                seed=(seed + turn) % (2**31 - 1),
            )
            step = self._step(episode, self.codec.decode_completion(output))
            reward += step.reward
            if step.done:
                break
            conversation.add_turn(output, step.observation)
        return reward

    # The environment is the user's code: what it raises names it.

    def _episode(self, index: int) -> Episode:
        try:
            return self.environment.episode(index)
        except Exception as exc:
            raise self._failed(exc, "episode()") from exc

    def _step(self, episode: Episode, action: str) -> Step:
        try:
            return episode.step(action)
        except Exception as exc:
            raise self._failed(exc, "step()") from exc

    def _failed(self, exc: Exception, call: str) -> UserCodeFailed:
        kind = type(self.environment)
        fault = fault_from_exception(
            exc,
            field=ENVIRONMENT_FIELD,
            reference=f"{kind.__module__}:{kind.__qualname__}",
            reason=ENVIRONMENT_RAISED,
            call=call,
        )
        if self.drop_infrastructure_errors and is_infrastructure(exc):
            self.faults.record(fault, then=f"its prompt group is dropped ({DROP_SETTING})")
            return UserCodeFailed(fault, dropped=ENVIRONMENT_ERROR)
        self.faults.record(fault, then="its prompt group fails and is retried")
        return UserCodeFailed(fault)
