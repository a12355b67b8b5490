"""The supported SGLang range is the tested range (`dressage.api.sglang`): a job may name any
release from the oldest tested to the newest tested, an older one is refused naming the field
and the range, a newer one is accepted as untested; the newest tested release is the default,
and every tested release has its contract-tier environment list."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dressage.api import JobValidationError, validate_job
from dressage.api.crd import render_crd
from dressage.api.sglang import (
    SGLANG_DEFAULT_VERSION,
    SGLANG_NEWEST_TESTED,
    SGLANG_OLDEST_TESTED,
    SGLANG_TESTED_RANGE,
    SGLANG_TESTED_RELEASES,
    check_release_in_range,
    is_untested_newer,
    parse_version,
    untested_release_message,
)

ROOT = Path(__file__).resolve().parents[3]
RELEASE_LISTS = ROOT / "tests" / "contract" / "releases"


def _manifest(**inference: object) -> dict[str, object]:
    return {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": "job-a"},
        "spec": {"model": {"source": "builtin:tiny"}, "inference": inference},
    }


def test_the_matrix_is_ordered_and_the_default_is_its_newest_release() -> None:
    parsed = [parse_version(v) for v in SGLANG_TESTED_RELEASES]
    assert parsed == sorted(set(parsed)), "SGLANG_TESTED_RELEASES must be oldest first, distinct"
    assert SGLANG_DEFAULT_VERSION == SGLANG_NEWEST_TESTED
    assert validate_job(_manifest()).spec.inference.sglang_version == SGLANG_NEWEST_TESTED


@pytest.mark.parametrize("version", ["0.5.1", "0.4.9", "v0.5.1.post2"])
def test_an_older_release_is_refused_naming_the_field_and_the_range(version: str) -> None:
    with pytest.raises(JobValidationError) as info:
        validate_job(_manifest(sglangVersion=version))
    errors = dict(info.value.errors)
    assert (
        f"{SGLANG_OLDEST_TESTED} to {SGLANG_NEWEST_TESTED}"
        in errors["spec.inference.sglangVersion"]
    )


@pytest.mark.parametrize("version", [*SGLANG_TESTED_RELEASES, "0.5.20", "0.5.3.post1", "v0.5.9"])
def test_a_release_in_the_tested_range_is_accepted_without_a_warning(version: str) -> None:
    job = validate_job(_manifest(sglangVersion=version))
    assert job.spec.inference.sglang_version == version
    assert untested_release_message(version) is None


@pytest.mark.parametrize("version", ["0.5.24", "0.6.0", "1.0.0"])
def test_a_newer_release_is_accepted_as_untested(version: str) -> None:
    validate_job(_manifest(sglangVersion=version))
    message = untested_release_message(version)
    assert message is not None
    assert version in message
    assert SGLANG_TESTED_RANGE in message


@given(st.tuples(*(st.integers(0, 30),) * 3))
def test_every_release_is_refused_accepted_or_untested_by_its_place_in_the_range(
    parts: tuple[int, int, int],
) -> None:
    version = ".".join(map(str, parts))
    older = parts < parse_version(SGLANG_OLDEST_TESTED)
    newer = parts > parse_version(SGLANG_NEWEST_TESTED)
    if older:
        with pytest.raises(ValueError, match=re.escape(SGLANG_TESTED_RANGE)):
            check_release_in_range(version)
    else:
        check_release_in_range(version)
    assert is_untested_newer(version) is newer
    assert (untested_release_message(version) is not None) is newer


def test_the_crd_describes_the_tested_range() -> None:
    """The field's description is prose in `dressage/api/job.py`: moving the matrix without
    it fails here."""
    text = str(render_crd())
    assert f"Tested: {SGLANG_OLDEST_TESTED} to {SGLANG_NEWEST_TESTED}." in text


@pytest.mark.parametrize("release", SGLANG_TESTED_RELEASES)
def test_every_tested_release_has_its_environment_list(release: str) -> None:
    """`scripts/sglang-env.sh` installs `tests/contract/releases/<release>.txt`: the release
    itself and every extra pinned to one version."""
    lines = [
        line.split("#", 1)[0].strip()
        for line in (RELEASE_LISTS / f"{release}.txt").read_text().splitlines()
    ]
    requirements = [line for line in lines if line]
    assert f"sglang=={release}" in requirements
    unpinned = [r for r in requirements if not re.fullmatch(r"[\w.-]+==[\w.+-]+", r)]
    assert not unpinned, f"{release}.txt: not pinned to one version: {unpinned}"
