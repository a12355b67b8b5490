"""The evaluator counts every token of its attempts for the token ledger's `evaluation`
account: a refused attempt's finished trajectories, a group generated again because it
straddled a publish, and the group it counted."""

from __future__ import annotations

from dressage.data.groups import Group, GroupFailed
from dressage.data.samples import Sample
from dressage.evaluation.evaluator import EvaluationSettings, Evaluator


def group(versions: list[str]) -> Group:
    samples = tuple(
        Sample.build(
            prompt_tokens=[1],
            response_tokens=[5] * len(versions),
            response_versions=versions,
            rollout_log_probs=[-0.1] * len(versions),
            reward=1.0,
            group_id="eval.j.v0-p0",
            parent_traj_id=f"t{i}",
        )
        for i in range(2)
    )
    return Group("eval.j.v0-p0", samples)


async def test_every_evaluation_attempts_tokens_are_counted() -> None:
    attempts = iter(["refused", ["v0", "v0", "v1"], ["v0", "v0"]])

    async def agent(index: int, attempt: int) -> Group:
        step = next(attempts)
        if step == "refused":
            failed = GroupFailed("version_changed_without_partial_rollout", staleness=True)
            failed.tokens = 4
            raise failed
        return group(list(step))

    generated: list[int] = []
    evaluator = Evaluator(
        lambda version: agent,
        EvaluationSettings(prompts=1, ks=[1]),
        generated=generated.append,
    )
    evaluation = await evaluator.evaluate("v0", 0)
    assert evaluation.version == "v0"
    assert generated == [4, 6, 4]  # refused; straddled (2 x 3 tokens); counted (2 x 2)
