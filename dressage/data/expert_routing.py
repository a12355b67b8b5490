"""The experts an MoE model routed each token of a sequence to, in SGLang's encoding.

SGLang (`return_routed_experts`, from 0.5.7; `managers/detokenizer_manager.py`,
`state_capturer/routed_experts.py` at 0.5.23) returns `meta_info.routed_experts`: the base64 of
an int32 array of shape `[seqlen - 1, num_hidden_layers, num_experts_per_tok]`, row `t` being
the experts token `t` of prompt + output was routed to in each layer (the last output token is
never run through the model). Layers that are dense hold zeros. `RoutedExperts` keeps those
bytes as they came (little-endian int32, row-major) with the row count; the row width is
`num_hidden_layers * num_experts_per_tok`, which only the model knows how to split.

Rows cover a prefix of a token sequence: row `t` is token `t`. When several answers cover the
same positions (the turns of a multi-turn trajectory, the pieces of a resumed generation), the
first report of a position is kept (`extend`): it is the routing of the forward pass that
produced the token after it.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

INT32_BYTES = 4


@dataclass(frozen=True)
class RoutedExperts:
    """Routed experts of the first `rows` tokens of a sequence, `width` int32 per token."""

    data: bytes
    rows: int
    width: int

    def __post_init__(self) -> None:
        if self.rows < 0 or self.width < 1:
            raise ValueError(f"routed experts need rows >= 0 and width >= 1, got {self}")
        if len(self.data) != self.rows * self.width * INT32_BYTES:
            raise ValueError(
                f"routed experts: {len(self.data)} bytes is not {self.rows} rows of "
                f"{self.width} int32"
            )

    def __repr__(self) -> str:
        return f"RoutedExperts(rows={self.rows}, width={self.width})"

    @classmethod
    def from_base64(cls, text: str, rows: int) -> RoutedExperts:
        """Decode SGLang's `meta_info.routed_experts` covering `rows` tokens; ValueError
        saying what does not fit."""
        try:
            data = base64.b64decode(text.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            raise ValueError("routed_experts is not base64") from None
        if rows <= 0:
            raise ValueError(f"routed_experts for {rows} tokens: nothing can be routed")
        per_row, rest = divmod(len(data), rows * INT32_BYTES)
        if rest or per_row == 0:
            raise ValueError(
                f"routed_experts: {len(data)} bytes do not split into {rows} rows of int32"
            )
        return cls(data, rows, per_row)

    def to_base64(self) -> str:
        return base64.b64encode(self.data).decode("ascii")

    def head(self, rows: int) -> RoutedExperts:
        """The first `rows` rows (all of them when there are fewer)."""
        rows = max(0, min(rows, self.rows))
        return RoutedExperts(self.data[: rows * self.width * INT32_BYTES], rows, self.width)

    def extend(self, later: RoutedExperts) -> RoutedExperts:
        """These rows, then `later`'s rows beyond them (both start at token 0): a position
        keeps its first report."""
        if later.width != self.width:
            raise ValueError(
                f"routed experts of width {later.width} cannot extend width {self.width}"
            )
        if later.rows <= self.rows:
            return self
        start = self.rows * self.width * INT32_BYTES
        return RoutedExperts(self.data + later.data[start:], later.rows, self.width)

    def values(self) -> list[int]:
        """Every expert id, row-major (for tests and small sequences)."""
        return [
            int.from_bytes(self.data[i : i + INT32_BYTES], "little", signed=True)
            for i in range(0, len(self.data), INT32_BYTES)
        ]


def merge_routes(
    earlier: RoutedExperts | None, later: RoutedExperts | None
) -> RoutedExperts | None:
    """`earlier.extend(later)`, with None for "no report"."""
    if earlier is None:
        return later
    if later is None:
        return earlier
    return earlier.extend(later)
