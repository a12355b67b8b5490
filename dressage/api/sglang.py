"""The SGLang releases a job may name (`spec.inference.sglangVersion`), torch- and I/O-free.

The supported range is the tested range. `SGLANG_TESTED_RELEASES` is the release matrix: the
contract tier (`tests/contract/`) runs once against each of them (`scripts/test.sh`), and
moving the matrix is `bash scripts/sglang-compat.sh VERSION` plus the fixes it shows. A job
may name any release from the oldest tested to the newest tested; an older one is refused, and
a newer one is accepted as untested: the operator marks the job `SGLangReleaseUntested` and
posts a Warning Event, `dressage run` prints one warning. The newest tested release is the
default and the release of the engine image (`images/sglang/Dockerfile`).

The job model and the operator read these here, below every other layer;
`dressage.engine.sglang_support` re-exports them with the per-feature table.
"""

from __future__ import annotations

import re

SGLANG_TESTED_RELEASES: tuple[str, ...] = ("0.5.2", "0.5.23")
"""The releases the contract tier runs against, oldest first: the oldest release Dressage
supports and the newest on the package index when the matrix last moved. Each has its
environment list in `tests/contract/releases/<release>.txt`."""
SGLANG_OLDEST_TESTED = SGLANG_TESTED_RELEASES[0]
SGLANG_NEWEST_TESTED = SGLANG_TESTED_RELEASES[-1]
SGLANG_TESTED_RANGE = f"{SGLANG_OLDEST_TESTED} to {SGLANG_NEWEST_TESTED}"
"""The tested range in words (`0.5.2 to 0.5.23`), as messages name it."""

SGLANG_DEFAULT_VERSION = SGLANG_NEWEST_TESTED
"""`spec.inference.sglangVersion`'s default: the release of the engine image and of the
chart's default engine image tag."""
SGLANG_PINNED_VERSION = SGLANG_DEFAULT_VERSION
"""The release in the engine image (the same as `SGLANG_DEFAULT_VERSION`)."""
SGLANG_MIN_VERSION = SGLANG_OLDEST_TESTED
"""The oldest release Dressage supports."""

DETERMINISTIC_INFERENCE_SINCE = "0.5.3"
"""The first release whose server has `--enable-deterministic-inference`, the mode in which
its sampler draws from `sampling_params.sampling_seed` (`server_args.py`, `layers/sampler.py`);
0.5.2's parser refuses the flag."""
MODEL_INFO_ROUTE_SINCE = "0.5.6"
"""The first release that serves `GET /model_info`; from the same release on,
`GET /get_model_info`, `/get_server_info` and `/get_weight_version` are deprecated aliases
that log a warning on every call (`entrypoints/http_server.py`, read in the 0.5.5 and 0.5.6
wheels; `/get_weight_version` is gone by 0.5.23)."""

ROUTED_EXPERTS_SINCE = "0.5.7"
"""The first release whose `/generate` takes `return_routed_experts` and answers
`meta_info.routed_experts` (`managers/io_struct.py`, `layers/moe/routed_experts_capturer.py`),
on a server started with `--enable-return-routed-experts`; 0.5.6 has neither."""

ACCESS_LOG_EXCLUDE_SINCE = "0.5.8"
"""The first release whose server has `--uvicorn-access-log-exclude-prefixes` (`server_args.py`
in the 0.5.8 wheel, absent from 0.5.7's; `arg_groups/fields/observability.py` by 0.5.23): the
uvicorn access log leaves out every request whose path starts with one of the prefixes
(`utils/common.py` `UvicornAccessLogFilter`, `path.startswith(prefix)`)."""

_RELEASE = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")


def parse_version(text: str) -> tuple[int, int, int]:
    """`0.5.3.post1` or `v0.5.3` -> `(0, 5, 3)`; ValueError naming the text otherwise."""
    match = _RELEASE.match(text.strip())
    if match is None:
        raise ValueError(f"not an SGLang release version: {text!r}")
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch


def at_least(version: str, since: str) -> bool:
    """Whether release `version` is `since` or later."""
    return parse_version(version) >= parse_version(since)


def check_release_in_range(version: str) -> None:
    """ValueError when `version` is not a release a job may name: not a version, or older than
    the oldest tested release. Releases newer than the newest tested are accepted
    (`is_untested_newer` says so)."""
    if parse_version(version) < parse_version(SGLANG_OLDEST_TESTED):
        raise ValueError(
            f"SGLang {version} is older than the tested releases ({SGLANG_TESTED_RANGE}); "
            f"name {SGLANG_OLDEST_TESTED} or later"
        )


def stand_in_release(version: str) -> str:
    """The tested release whose HTTP API the embedded engine serves when a job names SGLang
    `version`: itself when tested, else the newest tested release not newer than it (the oldest
    tested one for an older release)."""
    if version in SGLANG_TESTED_RELEASES:
        return version
    wanted = parse_version(version)
    older = [r for r in SGLANG_TESTED_RELEASES if parse_version(r) <= wanted]
    return older[-1] if older else SGLANG_TESTED_RELEASES[0]


def has_routed_experts(version: str) -> bool:
    """Whether SGLang release `version` can return the routed experts of a generation."""
    return parse_version(version) >= parse_version(ROUTED_EXPERTS_SINCE)


def is_untested_newer(version: str) -> bool:
    """Whether `version` is newer than the newest tested release (accepted, untested)."""
    return parse_version(version) > parse_version(SGLANG_NEWEST_TESTED)


def untested_release_message(version: str) -> str | None:
    """The warning for a job naming `version`, or None when the release is in the tested
    range."""
    if not is_untested_newer(version):
        return None
    return (
        f"SGLang {version} is newer than the tested releases ({SGLANG_TESTED_RANGE}): the engine "
        "command line, probes and request shapes are those of "
        f"{SGLANG_NEWEST_TESTED}; check the release with `bash scripts/sglang-compat.sh "
        f"{version}` before relying on it"
    )


def has_access_log_exclusion(version: str) -> bool:
    """Whether SGLang release `version` has `--uvicorn-access-log-exclude-prefixes`."""
    return at_least(version, ACCESS_LOG_EXCLUDE_SINCE)


def has_deterministic_inference(version: str) -> bool:
    """Whether SGLang release `version` has `--enable-deterministic-inference`."""
    return at_least(version, DETERMINISTIC_INFERENCE_SINCE)
