"""What a model turn is made of: each engine answer (`Piece`) and the turn assembled from them
(`Generation`), as the generator (`dressage.proxy.generation`) builds it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dressage.data.expert_routing import RoutedExperts, merge_routes
from dressage.data.spans import VersionSpan, extend_spans, spans_to_sglang


@dataclass
class Piece:
    """One engine answer, parsed."""

    output_ids: list[int]
    logprobs: list[float]
    versions: list[str | None]
    finish_reason: dict[str, Any]
    text: str
    weight_version: str | None
    cached_tokens: int
    raw_logprobs: list[Any]
    runs: list[VersionSpan]
    """`versions` run-length encoded, no empty run."""
    engine_latency: float | None = None
    """The engine's own time for this piece (`meta_info.e2e_latency`), when it reports it."""
    routed_experts: RoutedExperts | None = None
    """The routing of the piece's input and output tokens but the last (when sent)."""
    meta_info: dict[str, Any] = field(default_factory=dict)
    """The engine's `meta_info` as sent (fields the proxy passes through, such as
    `indexer_topk`)."""


@dataclass
class Generation:
    """One model turn, possibly assembled from several pieces."""

    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[str | None] = field(default_factory=list)
    raw_logprobs: list[Any] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    finish_reason: dict[str, Any] = field(default_factory=lambda: {"type": "stop"})
    weight_version: str | None = None
    preempts: int = 0
    drained_tokens: int = 0
    """Tokens of the turn generated on an engine that a drain then took the turn from (kept
    with partial rollout; without it the turn starts over and keeps none)."""
    pieces: int = 0
    cached_tokens: int = 0
    engine_url: str | None = None
    spans: list[VersionSpan] = field(default_factory=list)
    """`versions` as runs, kept up to date by `add`."""
    engine_latency: float | None = None
    """The engines' reported time summed over the pieces; None when none reported it."""
    routed_experts: RoutedExperts | None = None
    """The routing of the turn's input and output tokens but the last, when asked for and
    sent (a position keeps its first report across pieces)."""
    meta_info: dict[str, Any] = field(default_factory=dict)
    """The last piece's `meta_info` as the engine sent it."""

    def add(self, piece: Piece) -> None:
        if not self.pieces:
            self.cached_tokens = piece.cached_tokens
        self.pieces += 1
        self.output_ids += piece.output_ids
        self.logprobs += piece.logprobs
        self.versions += piece.versions
        self.raw_logprobs += piece.raw_logprobs
        extend_spans(self.spans, piece.runs)
        self.routed_experts = merge_routes(self.routed_experts, piece.routed_experts)
        self.texts.append(piece.text)
        if piece.engine_latency is not None:
            self.engine_latency = (self.engine_latency or 0.0) + piece.engine_latency
        finish = piece.finish_reason
        if finish.get("type") == "length" and self.pieces > 1:
            # A turn resumed across pauses ran out of its whole budget, not the last piece's.
            finish = {**finish, "length": len(self.output_ids)}
        self.finish_reason = finish
        self.weight_version = piece.weight_version
        self.meta_info = piece.meta_info

    def version_spans(self) -> list[dict[str, Any]]:
        """`meta_info.weight_versions` of the whole turn (one span per run of a version)."""
        return spans_to_sglang(self.spans)

    def restart(self) -> int:
        """Start the turn over from its prompt, keeping its preempts (plus this one); the
        tokens thrown away, which the token ledger counts as lost."""
        thrown = len(self.output_ids)
        self.__dict__.update(Generation(preempts=self.preempts + 1).__dict__)
        return thrown
