"""Long-tail arithmetic: the arithmetic task with heavy-tailed response lengths.

Reasoning and agent rollouts have heavy-tailed lengths: most responses end quickly and a few run
10-50x longer, so a synchronous step waits for its longest sample while the engines sit mostly
idle. This task makes that regime reproducible. Its prompts and reward are the arithmetic
task's (`"7+5="` -> `"12"`, reward 1 for the exact sum, read from the response up to its first
end-of-sequence), and every trajectory has a fixed response length, its *budget*, drawn for
`(prompt index, group member)` from a stated distribution:

    X ~ (1 - p) * LogNormal(ln m, s) + p * LogNormal(ln(f * m), s_tail)
    L = min(max(round(X), min_tokens), max_tokens)

a two-component lognormal mixture: a body with median `m` (`medianTokens`, default 8) and log
standard deviation `s` (`sigma`, 0.35), and a tail that holds a share `p` (`tailProbability`,
0.05) of the responses at `f` (`tailFactor`, 20) times the median with log standard deviation
`s_tail` (`tailSigma`, 0.2). With the defaults the median length is 8 tokens, the middle 95 %
of the body spans 4-16 tokens and that of the tail 110-240 (up to 30-40x the median), and the
mean is 16.2 tokens, half of them in the tail; `minTokens` (3) leaves room for a two-digit
answer and its end-of-sequence, `maxTokens` (320) bounds the context. `lengths_cdf` is the
distribution's exact CDF.

The rollout generates exactly `L` tokens: `max_new_tokens = L` with `ignore_eos`, the way
SGLang's own serving benchmark fixes output lengths. The policy writes its answer first and
ends it with end-of-sequence as in the arithmetic task; what it generates after that fills the
rest of the budget, as the tail of a long reasoning trace would, and is trained like any other
response token. The reward, and so what RL learns, is the arithmetic task's; the lengths are the
task's, independent of the policy, so every mode of a benchmark sees the same length
distribution. Budgets are a pure function of the task seed, the prompt index (modulo the data
set size) and the member, so a retried group regenerates the same lengths.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from dressage.api.job import TaskSpec
from dressage.tasks.arithmetic import DEFAULT_MAX_OPERAND, ArithmeticTask


@dataclass(frozen=True)
class LengthDistribution:
    """The stated response-length distribution (see the module docstring)."""

    median_tokens: float = 8.0
    sigma: float = 0.35
    tail_probability: float = 0.05
    tail_factor: float = 20.0
    tail_sigma: float = 0.2
    min_tokens: int = 3
    max_tokens: int = 320

    def __post_init__(self) -> None:
        checks = [
            (self.median_tokens > 0, "medianTokens must be > 0"),
            (self.sigma >= 0, "sigma must be >= 0"),
            (0 <= self.tail_probability <= 1, "tailProbability must be in [0, 1]"),
            (self.tail_factor >= 1, "tailFactor must be >= 1"),
            (self.tail_sigma >= 0, "tailSigma must be >= 0"),
            (self.min_tokens >= 1, "minTokens must be >= 1"),
            (self.max_tokens >= self.min_tokens, "maxTokens must be >= minTokens"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(f"spec.task.params: {message}")

    def draw(self, rng: random.Random) -> int:
        """One length from `rng` (two draws: the component, then its lognormal)."""
        tail = rng.random() < self.tail_probability
        median = self.median_tokens * (self.tail_factor if tail else 1.0)
        x = rng.lognormvariate(math.log(median), self.tail_sigma if tail else self.sigma)
        return min(max(round(x), self.min_tokens), self.max_tokens)

    def mixture_cdf(self, x: float) -> float:
        """P(X <= x) of the continuous mixture, before rounding and clipping."""
        if x <= 0:
            return 0.0
        body = _lognormal_cdf(x, math.log(self.median_tokens), self.sigma)
        tail = _lognormal_cdf(x, math.log(self.median_tokens * self.tail_factor), self.tail_sigma)
        return (1 - self.tail_probability) * body + self.tail_probability * tail

    def lengths_cdf(self, k: int) -> float:
        """P(L <= k): the exact CDF of the rounded, clipped length."""
        if k < self.min_tokens:
            return 0.0
        if k >= self.max_tokens:
            return 1.0
        # round() sends x to k for k - 0.5 <= x <= k + 0.5 (ties to even are measure zero).
        return self.mixture_cdf(k + 0.5)


def _lognormal_cdf(x: float, mu: float, sigma: float) -> float:
    if sigma == 0:
        return 1.0 if math.log(x) >= mu else 0.0
    return 0.5 * (1 + math.erf((math.log(x) - mu) / (sigma * math.sqrt(2))))


class LongTailTask(ArithmeticTask):
    """Addition with a heavy-tailed, fixed response length per trajectory."""

    name = "long_tail"

    def __init__(
        self,
        *,
        seed: int = 0,
        dataset_size: int = 4096,
        max_operand: int = DEFAULT_MAX_OPERAND,
        lengths: LengthDistribution | None = None,
    ) -> None:
        super().__init__(seed=seed, dataset_size=dataset_size, max_operand=max_operand)
        self.lengths = lengths or LengthDistribution()

    @property
    def max_response_tokens(self) -> int:
        return self.lengths.max_tokens

    def response_tokens(self, index: int, member: int) -> int:
        """The exact response length of member `member` of the group at prompt `index`."""
        if member < 0:
            raise ValueError(f"member must be >= 0, got {member}")
        rng = random.Random(f"long_tail:{self.seed}:{index % self.dataset_size}:{member}")
        return self.lengths.draw(rng)


_FLOAT_PARAMS = {
    "medianTokens": "median_tokens",
    "sigma": "sigma",
    "tailProbability": "tail_probability",
    "tailFactor": "tail_factor",
    "tailSigma": "tail_sigma",
}
_INT_PARAMS = {"minTokens": "min_tokens", "maxTokens": "max_tokens", "maxOperand": "max_operand"}


def from_spec(spec: TaskSpec) -> LongTailTask:
    unknown = set(spec.params) - set(_FLOAT_PARAMS) - set(_INT_PARAMS)
    if unknown:
        raise ValueError(f"spec.task.params: unknown long_tail settings {sorted(unknown)}")
    if spec.max_turns not in (None, 1):
        raise ValueError(f"spec.task.maxTurns: long_tail is single-turn, got {spec.max_turns}")
    values: dict[str, float | int] = {}
    for key, attr in _FLOAT_PARAMS.items():
        raw = spec.params.get(key)
        if raw is None:
            continue
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            raise ValueError(f"spec.task.params.{key} must be a number, got {raw!r}")
        values[attr] = float(raw)
    for key, attr in _INT_PARAMS.items():
        raw = spec.params.get(key)
        if raw is None:
            continue
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise ValueError(f"spec.task.params.{key} must be an integer, got {raw!r}")
        values[attr] = raw
    max_operand = int(values.pop("max_operand", DEFAULT_MAX_OPERAND))
    lengths = LengthDistribution(**values)  # type: ignore[arg-type]
    return LongTailTask(
        seed=spec.seed, dataset_size=spec.dataset_size, max_operand=max_operand, lengths=lengths
    )
