"""The release profiles are the tested matrix, and each one's route table is complete."""

from __future__ import annotations

import pytest

from dressage.api.sglang import SGLANG_NEWEST_TESTED, SGLANG_TESTED_RELEASES
from dressage.engine.embedded.release_profiles import (
    DEFAULT_RELEASE,
    PROFILES,
    deprecation_warning,
    profile_for,
    stand_in_release,
)
from dressage.engine.embedded.server import route_table


def test_there_is_one_profile_per_tested_release_and_the_newest_is_the_default() -> None:
    assert tuple(PROFILES) == SGLANG_TESTED_RELEASES
    assert DEFAULT_RELEASE == SGLANG_NEWEST_TESTED


def test_an_untested_release_has_no_profile_and_the_error_names_the_tested_ones() -> None:
    with pytest.raises(ValueError, match=r"SGLang 0\.5\.20.*0\.5\.2, 0\.5\.23"):
        profile_for("0.5.20")


@pytest.mark.parametrize(
    ("version", "played"),
    [
        ("0.5.2", "0.5.2"),
        ("0.5.23", "0.5.23"),
        ("0.5.20", "0.5.2"),
        ("0.5.3.post1", "0.5.2"),
        ("0.5.30", "0.5.23"),
        ("0.4.10", "0.5.2"),
    ],
)
def test_an_untested_release_is_played_by_the_newest_tested_one_not_newer(
    version: str, played: str
) -> None:
    assert stand_in_release(version) == played


@pytest.mark.parametrize("release", SGLANG_TESTED_RELEASES)
def test_every_route_of_a_profile_is_served_and_aliases_warn(release: str) -> None:
    profile = PROFILES[release]
    table = route_table(profile)
    served = {(method, path) for path, _, methods in table for method in methods}
    assert served == profile.routes
    for alias, route in profile.deprecated.items():
        assert f"Endpoint '{alias}' is deprecated" in deprecation_warning(alias, route)
        assert f"Please use '{route}' instead." in deprecation_warning(alias, route)


def test_the_releases_differ_where_dressage_meets_them() -> None:
    old, new = PROFILES["0.5.2"], PROFILES["0.5.23"]
    assert old.weight_version_route == "/get_weight_version"
    assert new.weight_version_route == "/model_info"
    assert not old.serves("GET", "/model_info")
    assert not new.serves("GET", "/get_weight_version")
    assert (old.weight_update_sessions, new.weight_update_sessions) == (False, True)
    assert (old.flattened_bucket, new.flattened_bucket) == (False, True)
    assert (old.validation, new.validation) == ("dataclass", "schema-gate")
    assert (old.flush_refused_while_running, new.flush_refused_while_running) == (False, True)
    assert old.aborts.queued_message == "Abort before prefill"
    assert new.aborts.queued_message == "Abort in waiting queue"
    assert "weight_versions" in new.meta_info_keys
    assert "weight_versions" not in old.meta_info_keys
