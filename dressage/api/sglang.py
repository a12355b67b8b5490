"""The SGLang releases a job may name (`spec.inference.sglangVersion`), torch- and I/O-free.

`SGLANG_PINNED_VERSION` is the release the engine image runs (`images/sglang/Dockerfile`);
`SGLANG_MIN_VERSION` the oldest release Dressage talks to; `SGLANG_NEXT_UNSUPPORTED` the first
release beyond the supported range (the next minor series, whose server flags and request
fields Dressage has not been checked against). The job model and the operator read these
here, below every other layer; `dressage.engine.sglang_support` re-exports them with the
per-feature table.
"""

from __future__ import annotations

import re

SGLANG_TESTED_RELEASES: tuple[str, ...] = ("0.5.2", "0.5.23")
"""The releases the contract tier (`tests/contract/`) runs against, oldest first: the oldest
release Dressage supports and the newest on the package index when the matrix last moved."""
SGLANG_OLDEST_TESTED = SGLANG_TESTED_RELEASES[0]
SGLANG_NEWEST_TESTED = SGLANG_TESTED_RELEASES[-1]

SGLANG_PINNED_VERSION = "0.5.2"
"""The release in the engine image and in the contract tests' environment."""
SGLANG_MIN_VERSION = "0.5.2"
"""The oldest release the client supports."""
SGLANG_NEXT_UNSUPPORTED = "0.6.0"
"""The first release past the supported range (`SGLANG_MIN_VERSION` <= v < this)."""
DETERMINISTIC_INFERENCE_SINCE = "0.5.3"
"""The first release whose server has `--enable-deterministic-inference`, the mode in which
its sampler draws from `sampling_params.sampling_seed` (`server_args.py`, `layers/sampler.py`);
0.5.2's parser refuses the flag."""

ROUTED_EXPERTS_SINCE = "0.5.7"
"""The first release whose `/generate` takes `return_routed_experts` and answers
`meta_info.routed_experts` (`managers/io_struct.py`, `layers/moe/routed_experts_capturer.py`),
on a server started with `--enable-return-routed-experts`; 0.5.6 has neither."""

_RELEASE = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")


def parse_version(text: str) -> tuple[int, int, int]:
    """`0.5.3.post1` or `v0.5.3` -> `(0, 5, 3)`; ValueError naming the text otherwise."""
    match = _RELEASE.match(text.strip())
    if match is None:
        raise ValueError(f"not an SGLang release version: {text!r}")
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch


def check_release_in_range(version: str) -> None:
    """ValueError when `version` is not a release in the supported range (what a job may
    name; the engine client itself refuses only releases older than the minimum)."""
    parsed = parse_version(version)
    if parsed < parse_version(SGLANG_MIN_VERSION):
        raise ValueError(
            f"SGLang {version} is older than {SGLANG_MIN_VERSION}, the oldest release "
            "Dressage supports"
        )
    if parsed >= parse_version(SGLANG_NEXT_UNSUPPORTED):
        raise ValueError(
            f"SGLang {version} is past the supported range ({SGLANG_MIN_VERSION} up to, not "
            f"including, {SGLANG_NEXT_UNSUPPORTED})"
        )


def has_routed_experts(version: str) -> bool:
    """Whether SGLang release `version` can return the routed experts of a generation."""
    return parse_version(version) >= parse_version(ROUTED_EXPERTS_SINCE)


def has_deterministic_inference(version: str) -> bool:
    """Whether SGLang release `version` has `--enable-deterministic-inference`."""
    return parse_version(version) >= parse_version(DETERMINISTIC_INFERENCE_SINCE)
