"""Version lag: hand-computed batches, and the properties every batch keeps.

The lag of a sample is the trainer's version minus the sample's trajectory version, counted in
the order versions were first observed (never by sorting labels); unknown versions are left
out of the figures and counted apart (`dressage.rollout.lag`).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dressage.api.figures import StepFigures, figure, line_parts
from dressage.data.samples import Sample
from dressage.rollout.lag import (
    VERSION_LAG_MAX,
    VERSION_LAG_MEAN,
    VERSION_LAG_TOKEN_MEAN,
    VERSION_LAG_UNKNOWN_SAMPLES,
    BatchLag,
    batch_lag,
    trainer_version_order,
    version_lag,
)
from dressage.rollout.staleness import StalenessTracker


def sample(
    versions: Sequence[object],
    *,
    traj: str | None = "t",
    segment: int = 0,
    mask: Sequence[int] | None = None,
) -> Sample:
    """A sample whose response tokens carry `versions` (one token each)."""
    n = len(versions)
    return Sample.build(
        prompt_tokens=[1],
        response_tokens=list(range(2, 2 + n)),
        response_versions=list(versions),
        rollout_log_probs=[-0.1] * n,
        loss_mask=mask,
        parent_traj_id=traj,
        segment_index=segment,
    )


def order(*labels: str) -> StalenessTracker:
    tracker = StalenessTracker(0)
    for label in labels:
        tracker.observe(label)
    return tracker


def test_trainer_order_is_the_order_versions_were_issued() -> None:
    assert trainer_version_order(3).versions == ["v0", "v1", "v2", "v3"]
    assert trainer_version_order(0).versions == ["v0"]
    with pytest.raises(ValueError, match=">= 0"):
        trainer_version_order(-1)


def test_versions_count_in_observed_order_not_label_order() -> None:
    """Observed v9, v10, v11: sorting the labels would put v10 first and v9 last."""
    seen = order("v9", "v10", "v11")
    batch = [sample(["v9"], traj="a"), sample(["v10"], traj="b"), sample(["v11"], traj="c")]
    assert batch_lag(batch, seen, "v11").lags == (2, 1, 0)
    assert batch_lag(batch, seen, "v10").lags == (1, 0, None)  # v11 is ahead of the trainer
    assert version_lag(seen, "v11", "v9") == 2


def test_unknown_versions_are_left_out_and_counted() -> None:
    seen = order("v0", "v1", "v2")
    batch = [
        sample(["v0", "v1"], traj="known"),  # end token v1: lag 1
        sample([None, None], traj="missing"),
        sample(["unknown"], traj="unknown"),
        sample(["-1"], traj="minus-one"),
        sample([""], traj="empty"),
        sample(["v7"], traj="never-issued"),
    ]
    lag = batch_lag(batch, seen, "v2")
    assert lag.lags == (1, None, None, None, None, None)
    assert (lag.mean, lag.max, lag.token_mean, lag.unknown_samples) == (1.0, 1, 1.0, 5)
    # A trainer version the order does not hold makes every sample's lag unknown.
    nowhere = batch_lag(batch, seen, "v5")
    assert nowhere.unknown_samples == 6
    assert nowhere.figures() == {VERSION_LAG_UNKNOWN_SAMPLES: 6.0}
    assert (nowhere.mean, nowhere.max, nowhere.token_mean) == (None, None, None)


def test_every_segment_has_its_trajectory_lag() -> None:
    """The trajectory version is the end-token version of its last segment, whatever order
    the segments come in; a sample without a trajectory id is a trajectory of its own."""
    seen = order("v0", "v1", "v2", "v3")
    later = sample(["v1", "v2"], traj="a", segment=1)
    earlier = sample(["v0", "v0"], traj="a", segment=0)
    alone = sample(["v0"], traj=None)
    assert batch_lag([later, earlier, alone], seen, "v3").lags == (1, 1, 3)
    # The last segment's last trained token decides: an untrained v2 token does not count.
    masked = sample(["v1", "v2"], traj="b", segment=1, mask=[1, 0])
    assert batch_lag([sample(["v0"], traj="b"), masked], seen, "v3").lags == (2, 2)
    # A last segment without a trainable real version makes its trajectory unknown, as for
    # the batch rule, even where an earlier segment has one.
    untrained = sample(["v2"], traj="c", segment=1, mask=[0])
    assert batch_lag([sample(["v0"], traj="c"), untrained], seen, "v3").lags == (None, None)


def test_token_weighting_counts_trainable_tokens() -> None:
    seen = order("v0", "v1", "v2")
    fresh = sample(["v2", "v2", "v2"], traj="fresh")  # lag 0, 3 tokens
    stale = sample(["v0", "v0", "v0", "v0"], traj="stale", mask=[1, 0, 0, 0])  # lag 2, 1 token
    lag = batch_lag([fresh, stale], seen, "v2")
    assert lag.tokens == (3, 1)
    assert lag.figures() == {
        VERSION_LAG_MEAN: 1.0,
        VERSION_LAG_MAX: 2.0,
        VERSION_LAG_TOKEN_MEAN: 0.5,
        VERSION_LAG_UNKNOWN_SAMPLES: 0.0,
    }
    # No trainable token among the known samples: no token mean.
    assert BatchLag(lags=(1,), tokens=(0,)).token_mean is None


def test_batch_lag_refuses_inconsistent_records() -> None:
    with pytest.raises(ValueError, match="lags"):
        BatchLag(lags=(0, 1), tokens=(1,))
    with pytest.raises(ValueError, match=">= 0"):
        BatchLag(lags=(-1,), tokens=(1,))


def test_the_step_line_and_the_status_carry_the_lag() -> None:
    figures = StepFigures().with_trainer_figures(
        batch_lag(
            [sample(["v0"], traj="a"), sample(["v1"], traj="b")], order("v0", "v1"), "v1"
        ).figures()
    )
    assert (figures.version_lag_mean, figures.version_lag_max) == (0.5, 1.0)
    parts = line_parts(figures)
    assert "lag 0.50" in parts
    assert "lag_max 1" in parts
    assert "lag -" in line_parts(StepFigures())
    assert figure("version_lag_max").metric == "dressage_staleness_version_lag_max"
    assert figure("version_lag_max").status_key == "versionLagMax"
    assert figure("version_lag_mean").status


LABELS = [f"r{i}" for i in range(12)]
"""Labels of another source than the trainer's `v<index>`, so that any observation order
stands (the trainer's own labels take their issue place: `test_staleness.py`)."""
NOT_REAL = [None, "", "unknown", "-1"]


@given(
    observed=st.permutations(LABELS),
    trainer=st.integers(0, 11),
    picks=st.lists(
        st.tuples(st.sampled_from([*LABELS, *NOT_REAL, "x1"]), st.integers(0, 4)), max_size=12
    ),
)
def test_lag_properties(observed: list[str], trainer: int, picks: list[tuple[object, int]]) -> None:
    """Over any observation order: a known lag is the distance back in that order (so >= 0),
    every sample is known or counted unknown, max >= mean and max >= token mean, and
    relabelling the versions changes nothing (labels are never compared, only positions)."""
    seen = order(*observed)
    trainer_label = observed[trainer]

    def build(version: object, tokens: int, i: int) -> Sample:
        # `tokens` trainable tokens of `version`, or one untrained token.
        return sample([version] * max(tokens, 1), traj=f"t{i}", mask=[1] * tokens or [0])

    batch = [build(version, tokens, i) for i, (version, tokens) in enumerate(picks)]
    lag = batch_lag(batch, seen, trainer_label)
    assert len(lag.known) + lag.unknown_samples == len(batch)
    for x, (version, tokens) in zip(lag.lags, picks, strict=True):
        if version in observed and tokens and observed.index(version) <= trainer:
            assert x == trainer - observed.index(version)
            assert x >= 0
        else:
            assert x is None
    if lag.known:
        assert lag.mean is not None
        assert lag.max is not None
        assert 0 <= lag.mean <= lag.max
        assert lag.token_mean is None or 0 <= lag.token_mean <= lag.max
    rename = {label: f"w{len(LABELS) - i}" for i, label in enumerate(LABELS)}
    renamed = [
        build(rename.get(v, v) if isinstance(v, str) else v, n, i) for i, (v, n) in enumerate(picks)
    ]
    assert batch_lag(renamed, order(*(rename[v] for v in observed)), rename[trainer_label]) == lag
