"""Blackbox agents: unmodified external programs that only speak the OpenAI chat API.

The harness starts the agent's command once per trajectory, with the standard OpenAI
environment (`OPENAI_BASE_URL` pointing at the rollout proxy with the session in its path,
`OPENAI_API_KEY`) and the task's question on standard input, and scores what the program prints
with the task's verifiable reward. A dataset task's row also reaches the program: its reward
columns as a JSON object in `DRESSAGE_TASK_ROW`, and its chat messages (system prompt included)
as a JSON list in `DRESSAGE_TASK_MESSAGES` when the prompt has them. The proxy records every
chat turn as token-level segments with per-token versions, so the samples are the same as a
whitebox agent's.

Failures: a program that exits non-zero or runs past its deadline fails the trajectory, and so
the prompt group, which the collector retries whole. When the proxy refused the session (for
example 502 `partial_rollout_staleness_exceeded`), the failure carries that name so it is
counted as a staleness failure. Otherwise the program itself failed (`agent_failed`): the
failure is a `UserCodeFailed` with the exception and the line of the program's own code read
from the Python traceback on its standard error (or its exit code and last line of output).
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from dressage.agents.groups import GroupAgent, TrajectorySession
from dressage.proxy.client import RolloutError
from dressage.tasks.base import Prompt, Scored, Task, scored
from dressage.tasks.faults import (
    AGENT_FIELD,
    UserCodeFailed,
    UserCodeFaults,
    fault_from_stderr,
)

AGENT_ERROR = "agent_failed"
TASK_ROW_ENV = "DRESSAGE_TASK_ROW"
"""Environment variable holding the dataset row's reward columns (a JSON object)."""
TASK_MESSAGES_ENV = "DRESSAGE_TASK_MESSAGES"
"""Environment variable holding the prompt's chat messages (a JSON list), when it has them."""


@dataclass(kw_only=True, eq=False)
class BlackboxRollout(GroupAgent[Prompt]):
    """One prompt group of a blackbox agent: `(prompt index, attempt) -> Group`."""

    command: Sequence[str]
    """The agent program and its arguments (`task.agentCommand`)."""
    task: Task
    timeout_s: float = 300.0
    """A run of the program past this many seconds fails its trajectory."""
    api_key: str = "dressage"
    """`OPENAI_API_KEY` for the program (the proxy checks its own token, not this)."""
    faults: UserCodeFaults = field(default_factory=UserCodeFaults)
    """Where the program's failures are recorded (the run's registry)."""

    def __post_init__(self) -> None:
        if not self.command:
            raise ValueError("task.agentCommand: a blackbox agent needs a command")
        self.command = list(self.command)

    def prompt(self, index: int) -> Prompt:
        return self.task.prompt(index)

    async def trajectory(self, index: int, prompt: Prompt, session: TrajectorySession) -> Scored:
        await self.client.create_session(session.session_id, session.group_id)
        output = await self._run_agent(session, prompt)
        return await scored(self.task, prompt, output)

    async def _run_agent(self, session: TrajectorySession, prompt: Prompt) -> str:
        question = prompt.text
        env = dict(
            os.environ,
            # The replica that holds the session's group (`dressage.proxy.affinity`).
            OPENAI_BASE_URL=self.client.session_base_url(
                session.session_id, instance_id=session.group_id
            ),
            OPENAI_API_KEY=self.api_key,
            AGENT_MAX_TOKENS=str(self.sampling.max_new_tokens),
            AGENT_TEMPERATURE=str(self.sampling.temperature),
        )
        if prompt.row:
            env[TASK_ROW_ENV] = json.dumps(dict(prompt.row), default=str)
        if prompt.messages is not None:
            env[TASK_MESSAGES_ENV] = json.dumps([dict(m) for m in prompt.messages])
        process = await asyncio.create_subprocess_exec(
            *self.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        try:
            out, err = await asyncio.wait_for(
                process.communicate(question.encode()), self.timeout_s
            )
        except (TimeoutError, asyncio.CancelledError):
            process.kill()
            await process.wait()
            raise
        if process.returncode != 0:
            stderr = err.decode(errors="replace")
            code = await self.client.refusal(session.session_id, instance_id=session.group_id)
            if code is not None:
                tail = stderr.strip().splitlines()[-1:] or [""]
                raise RolloutError(
                    f"agent {self.command[0]} exited {process.returncode}: {tail[0][:200]}",
                    code=code,
                )
            fault = fault_from_stderr(
                stderr,
                field=AGENT_FIELD,
                reference=shlex.join(self.command),
                reason=AGENT_ERROR,
                exit_code=process.returncode,
            )
            self.faults.record(fault, then="its prompt group fails and is retried")
            raise UserCodeFailed(fault)
        return out.decode(errors="replace").strip()
