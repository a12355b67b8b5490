"""The training sample and its version metadata.

A `Sample` is one segment of one trajectory, as the trainer consumes it: the full token
sequence (prompt then response), which response tokens are trained (`loss_mask`), the rollout
logprobs, the reward, and its identity (`group_id`, `parent_traj_id`, `segment_index`).

Version metadata, per the design (`docs/staleness.md`):

- `full_versions`: one weight version per token of `tokens` (None for prompt tokens that no
  model generated, such as the user's text or tool output). `Sample.build` normalises the
  labels (`dressage.data.versions.normalize_version`): every non-real label is None.
- `version_spans`: `full_versions` compressed into runs (`dressage.data.spans.VersionSpan`);
  `expand_version_spans` restores it exactly.
- `dressage_start_token_version` / `dressage_end_token_version`: the versions of the first and
  the last *trainable* response token (loss mask 1 and a real version). The end-token version
  is the trajectory's version for batch-level staleness control.

`routed_experts` (MoE models, routing replay): the experts the rollout routed the first
`routed_experts.rows` tokens of `tokens` to (`dressage.data.expert_routing.RoutedExperts`); None
when
the rollout did not record them.

`mask_nonlast_version_tokens` (`--mask-nonlast-version-tokens`) is applied at one place only,
when the trainer turns a batch into training inputs (`dressage.trainer.batch.score_batch`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from statistics import fmean
from typing import Any, Final

from dressage.api.figures import figure
from dressage.data.expert_routing import RoutedExperts
from dressage.data.spans import VersionSpan, compress_versions
from dressage.data.versions import normalized_versions, version_span

# The batch statistics' keys, as the step's figures declare them.
VERSION_SPAN_MEAN: Final = figure("version_span_mean").key
VERSION_SPAN_MAX: Final = figure("version_span_max").key
VERSION_SPAN_MIN: Final = figure("version_span_min").key
DRAINED_TOKENS: Final = figure("drained_tokens").key
DRAINED_SAMPLES: Final = figure("drained_samples").key
VERSION_SPAN_SAMPLES: Final = "staleness/version_span_samples/"
"""Prefix of the batch's span histogram: `staleness/version_span_samples/N` counts the samples
whose output spans N versions (a step record's extras: one key per span the batch has, so not a
declared figure; `StepFigures` says why)."""


@dataclass(frozen=True)
class Sample:
    """One training sample (one segment of one trajectory).

    Build samples from raw labels with `Sample.build`, which normalises them; the fields hold
    canonical labels. Invariants (checked on construction):
    `len(full_versions) == len(tokens)`, `len(loss_mask) == len(rollout_log_probs) ==
    response_length <= len(tokens)`; the response is the last `response_length` tokens.
    """

    tokens: tuple[int, ...]
    response_length: int
    loss_mask: tuple[int, ...]
    rollout_log_probs: tuple[float, ...]
    full_versions: tuple[str | None, ...]
    reward: float | None = None
    group_id: str | None = None
    """The prompt group (GRPO group) this sample belongs to."""
    parent_traj_id: str | None = None
    """The trajectory this segment belongs to; samples of one trajectory share it."""
    segment_index: int = 0
    """Position of this segment within its trajectory."""
    metadata: dict[str, Any] = field(default_factory=dict, compare=False)
    routed_experts: RoutedExperts | None = None
    """The rollout's routed experts of the first `rows` tokens (MoE models); None: none
    recorded."""

    def __post_init__(self) -> None:
        n = len(self.tokens)
        if len(self.full_versions) != n:
            raise ValueError(f"full_versions has {len(self.full_versions)} entries for {n} tokens")
        if not 0 <= self.response_length <= n:
            raise ValueError(f"response_length {self.response_length} outside 0..{n}")
        for name in ("loss_mask", "rollout_log_probs"):
            size = len(getattr(self, name))
            if size != self.response_length:
                raise ValueError(
                    f"{name} has {size} entries, response_length is {self.response_length}"
                )
        if any(m not in (0, 1) for m in self.loss_mask):
            raise ValueError("loss_mask entries must be 0 or 1")
        routes = self.routed_experts
        if routes is not None and routes.rows > n:
            raise ValueError(f"routed_experts has {routes.rows} rows for {n} tokens")

    @classmethod
    def build(
        cls,
        *,
        prompt_tokens: Sequence[int],
        response_tokens: Sequence[int],
        response_versions: Sequence[object],
        rollout_log_probs: Sequence[float],
        loss_mask: Sequence[int] | None = None,
        prompt_versions: Sequence[object] | None = None,
        **identity: Any,
    ) -> Sample:
        """Assemble a sample from a prompt and a response with per-token versions.

        `loss_mask` defaults to training every response token; `prompt_versions` defaults to
        no version for every prompt token.
        """
        if len(response_versions) != len(response_tokens):
            raise ValueError("response_versions must have one entry per response token")
        pv = [None] * len(prompt_tokens) if prompt_versions is None else list(prompt_versions)
        if len(pv) != len(prompt_tokens):
            raise ValueError("prompt_versions must have one entry per prompt token")
        mask = [1] * len(response_tokens) if loss_mask is None else list(loss_mask)
        return cls(
            tokens=tuple(prompt_tokens) + tuple(response_tokens),
            response_length=len(response_tokens),
            loss_mask=tuple(mask),
            rollout_log_probs=tuple(float(x) for x in rollout_log_probs),
            full_versions=tuple(normalized_versions([*pv, *response_versions])),
            **identity,
        )

    # --- derived views -------------------------------------------------------------------

    @property
    def prompt_length(self) -> int:
        return len(self.tokens) - self.response_length

    @property
    def response_versions(self) -> tuple[str | None, ...]:
        """Versions of the response tokens."""
        return self.full_versions[self.prompt_length :]

    @property
    def version_spans(self) -> list[VersionSpan]:
        """`full_versions` compressed into runs."""
        return compress_versions(self.full_versions)

    def _trainable_versions(self) -> list[str]:
        return [
            v
            for v, m in zip(self.response_versions, self.loss_mask, strict=True)
            if m == 1 and v is not None
        ]

    @property
    def dressage_start_token_version(self) -> str | None:
        """Version of the first trainable response token with a real version."""
        trainable = self._trainable_versions()
        return trainable[0] if trainable else None

    @property
    def dressage_end_token_version(self) -> str | None:
        """Version of the last trainable response token with a real version."""
        trainable = self._trainable_versions()
        return trainable[-1] if trainable else None

    @property
    def output_version_span(self) -> int:
        """Distinct real versions among the response tokens, in observation order."""
        return version_span(self.response_versions)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-compatible view including the derived version metadata."""
        routes = self.routed_experts if self.routed_experts and self.routed_experts.rows else None
        return {
            "tokens": list(self.tokens),
            "response_length": self.response_length,
            "loss_mask": list(self.loss_mask),
            "rollout_log_probs": list(self.rollout_log_probs),
            "reward": self.reward,
            "group_id": self.group_id,
            "parent_traj_id": self.parent_traj_id,
            "segment_index": self.segment_index,
            "full_versions": list(self.full_versions),
            "version_spans": [s.to_list() for s in self.version_spans],
            "dressage_start_token_version": self.dressage_start_token_version,
            "dressage_end_token_version": self.dressage_end_token_version,
            "metadata": dict(self.metadata),
            "routed_experts": routes.to_base64() if routes is not None else None,
            "routed_experts_rows": routes.rows if routes is not None else 0,
        }


def mask_nonlast_version_tokens(sample: Sample) -> Sample:
    """`--mask-nonlast-version-tokens`: train only tokens of the last real output version.

    Response tokens whose real version differs from the version of the last real-versioned
    response token get loss mask 0. Tokens without a real version keep their mask (they carry
    no version evidence), and a sample with no real output version is returned unchanged.
    """
    real = [v for v in sample.response_versions if v is not None]
    if not real:
        return sample
    last = real[-1]
    mask = tuple(
        0 if (v is not None and v != last) else m
        for v, m in zip(sample.response_versions, sample.loss_mask, strict=True)
    )
    return replace(sample, loss_mask=mask)


def version_span_stats(samples: Iterable[Sample]) -> dict[str, float]:
    """Batch statistics `staleness/version_span_mean|max|min` over samples' output spans.

    Samples without any real output version are not counted; an empty result means no sample
    carried version information.
    """
    spans = [s.output_version_span for s in samples]
    spans = [s for s in spans if s > 0]
    if not spans:
        return {}
    return {
        VERSION_SPAN_MEAN: fmean(spans),
        VERSION_SPAN_MAX: float(max(spans)),
        VERSION_SPAN_MIN: float(min(spans)),
    }


def version_span_histogram(samples: Iterable[Sample]) -> dict[str, float]:
    """The batch's samples by output version span, `staleness/version_span_samples/N` -> how
    many span N real versions (samples without a real output version are not counted): the
    distribution behind `version_span_stats`, and the share of multi-version samples."""
    counts: dict[int, int] = {}
    for sample in samples:
        span = sample.output_version_span
        if span > 0:
            counts[span] = counts.get(span, 0) + 1
    return {f"{VERSION_SPAN_SAMPLES}{span}": float(n) for span, n in sorted(counts.items())}


def drained_token_stats(samples: Iterable[Sample]) -> dict[str, float]:
    """The batch's tokens generated on an engine that a drain then took their turn from, and
    the samples holding them (`DRAINED_TOKENS`, `DRAINED_SAMPLES`): with partial rollout every
    token a drained engine generated continues in its turn on another engine, so over a run
    these add up to what the proxy moved (`dressage_proxy_drained_tokens_total`) unless a
    group holding them was dropped or not trained yet."""
    tokens = samples_with = 0
    for sample in samples:
        drained = int(sample.metadata.get("drained_tokens") or 0)
        if drained > 0:
            tokens += drained
            samples_with += 1
    return {DRAINED_TOKENS: float(tokens), DRAINED_SAMPLES: float(samples_with)}
