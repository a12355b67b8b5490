"""The training rows: reward, the train/rollout gap and progress; the off-policy correction
and admission control; MoE routing replay."""

from __future__ import annotations

from dashboard.layout import JL, POD, J, Layout, rate
from dressage import metrics as m


def add(d: Layout) -> None:
    """Training, Off-policy correction and admission, MoE routing replay."""
    d.row("Training")
    d.timeseries(
        "Reward (mean)",
        "Mean reward of the trained batch.",
        [(f"avg by ({J}) ({m.REWARD_MEAN}{{{POD}}})", f"{JL}")],
        decimals=3,
    )
    d.timeseries(
        "train_rollout_logprob_abs_diff",
        "Mean |trainer logprob - rollout logprob| of trained tokens: the train-inference gap "
        "that staleness control keeps small.",
        [(f"avg by ({J}) ({m.TRAIN_ROLLOUT_LOGPROB_ABS_DIFF}{{{POD}}})", f"{JL}")],
        decimals=4,
    )
    d.timeseries(
        "Weight version and train step",
        "Ordinal of the latest published weight version and the trainer's step.",
        [
            (f"max by ({J}) ({m.WEIGHT_VERSION}{{{POD}}})", f"{JL} weight version"),
            (f"max by ({J}) ({m.TRAIN_STEP}{{{POD}}})", f"{JL} train step"),
        ],
        decimals=0,
    )
    d.timeseries(
        "Completed groups and trained samples / s",
        "Rollout throughput against what reaches the trainer.",
        [
            (rate(m.ROLLOUT_GROUPS_COMPLETED, POD, J), f"{JL} groups completed"),
            (rate(m.TRAINED_SAMPLES, POD, J), f"{JL} samples trained"),
        ],
        unit="ops",
    )
    per_step = f" / {rate(m.TRAIN_STEP, POD, J)}"
    d.timeseries(
        "Step time: batch wait, training, weight sync",
        "Mean seconds per step over the interval: waiting for the batch, the optimizer step "
        "with its checkpoint's commit, and publishing the weights to the engines.",
        [
            (rate(m.TRAINER_BATCH_WAIT_SECONDS, POD, J) + per_step, f"{JL} batch wait"),
            (rate(m.TRAINER_TRAIN_SECONDS, POD, J) + per_step, f"{JL} training"),
            (rate(m.TRAINER_PUBLISH_SECONDS, POD, J) + per_step, f"{JL} weight sync"),
        ],
        unit="s",
        width=8,
    )
    d.timeseries(
        "Trained and generated tokens / s",
        "Tokens trained, and tokens the engines generated for completed prompt groups (trained "
        "or dropped); the gap is what drops and masking waste.",
        [
            (rate(m.TRAINED_TOKENS, POD, J), f"{JL} trained"),
            (rate(m.GENERATED_TOKENS, POD, J), f"{JL} generated"),
        ],
        width=8,
    )
    d.timeseries(
        "Trainer waiting for batches",
        "Fraction of the trainer's step time spent waiting for its next batch over the "
        "interval: near 1, rollout cannot keep the trainer busy.",
        [
            (
                f"{rate(m.TRAINER_BATCH_WAIT_SECONDS, POD, J)}"
                f" / {rate(m.TRAINER_STEP_SECONDS, POD, J)}",
                f"{JL}",
            )
        ],
        unit="percentunit",
        width=8,
    )

    d.row("Off-policy correction and admission")
    d.timeseries(
        "Rollout/train mismatch KL (k1 / k3)",
        "mismatch_kl of the trained batch: k1 = mean(-log r) and k3 = mean(r - 1 - log r), "
        "r = exp(train logprob - rollout logprob) over trained tokens; k3 is never negative.",
        [
            (f"avg by ({J}) ({m.MISMATCH_KL_K1}{{{POD}}})", f"{JL} k1"),
            (f"avg by ({J}) ({m.MISMATCH_KL_K3}{{{POD}}})", f"{JL} k3"),
        ],
        decimals=4,
        width=8,
    )
    d.timeseries(
        "Tokens clipped / masked by the correction",
        "Fraction of trained tokens whose importance weight was clipped (TIS) or that were "
        "masked (token band, sequence mask); 0 while training.offPolicyCorrection is off.",
        [
            (
                f"avg by ({J}) ({m.OFF_POLICY_CLIPPED_FRACTION}{{{POD}}})",
                f"{JL} clipped",
            ),
            (
                f"avg by ({J}) ({m.OFF_POLICY_MASKED_FRACTION}{{{POD}}})",
                f"{JL} masked",
            ),
        ],
        unit="percentunit",
        width=8,
    )
    d.timeseries(
        "IS effective sample size",
        "(sum w)^2 / sum w^2 of the importance weights over trained tokens, as a fraction of "
        "the trained tokens: 1 when rollout and trainer agree, lower as they drift apart.",
        [(f"min by ({J}) ({m.IS_ESS_FRACTION}{{{POD}}})", f"{JL}")],
        unit="percentunit",
        width=8,
    )
    d.timeseries(
        "Admissions held / s",
        "Prompt groups whose start admission control held back because they could not have "
        "been trained inside the staleness window.",
        [(rate(m.ROLLOUT_ADMISSIONS_HELD, POD, J), f"{JL}")],
        unit="ops",
    )
    d.timeseries(
        "Rollout time waiting for admission",
        "Seconds per second the rollout worker waited for admission: 0 never waits, 1 waits "
        "all the time (the trainer is the bottleneck).",
        [(rate(m.ROLLOUT_ADMISSION_WAIT_SECONDS, POD, J), f"{JL}")],
        unit="percentunit",
    )

    d.row("MoE routing replay")
    d.timeseries(
        "Routing agreement and routed tokens",
        "MoE jobs with spec.rollout.routingReplay record or replay (no series otherwise). "
        "routing_agreement: share of the (token, MoE layer) pairs the rollout routed whose "
        "top-k expert set the trainer's own router picks too; low agreement is train/rollout "
        "mismatch coming back through the router, which replay removes from the loss. "
        "routed_token_fraction: share of the trained samples' tokens that carried the "
        "rollout's routes (the others are routed by the trainer's own router).",
        [
            (f"avg by ({J}) ({m.ROUTING_AGREEMENT}{{{POD}}})", f"{JL} agreement"),
            (
                f"avg by ({J}) ({m.ROUTED_TOKEN_FRACTION}{{{POD}}})",
                f"{JL} routed tokens",
            ),
        ],
        unit="percentunit",
        width=24,
    )
