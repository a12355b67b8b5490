"""Fixtures shared by the integration tests: the tiny model, built once per test module, the
SGLang releases the embedded engine plays, and the fork server every engine of the tier starts
from (`tests/engine_forks.py`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dressage.api.sglang import SGLANG_TESTED_RELEASES
from dressage.engine.embedded.model import ModelWeights, load_weights
from dressage.engine.embedded.release_profiles import PROFILES, ReleaseProfile
from dressage.model import BUILTIN_TINY, resolve_model_source
from tests.engine_forks import engine_fork_server  # noqa: F401 (every engine forked: see there)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model cache holding the built tiny model, for the module's engines."""
    path = tmp_path_factory.mktemp("engine-cache")
    resolve_model_source(BUILTIN_TINY, path)
    return path


@pytest.fixture(scope="module")
def weights(cache_dir: Path) -> ModelWeights:
    """The tiny model's weights, for reference decoding in this process."""
    return load_weights(resolve_model_source(BUILTIN_TINY, cache_dir))


@pytest.fixture(params=SGLANG_TESTED_RELEASES, ids=lambda release: f"sglang-{release}")
def engine_release(request: pytest.FixtureRequest) -> str:
    """Each SGLang release the embedded engine plays, in turn: a test that takes this fixture
    (or an engine started with it) runs once per release of the tested matrix."""
    release: str = request.param
    return release


@pytest.fixture
def engine_profile(engine_release: str) -> ReleaseProfile:
    """The profile of `engine_release`."""
    return PROFILES[engine_release]
