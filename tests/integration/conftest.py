"""Fixtures shared by the integration tests: the tiny model, built once per test module."""

from __future__ import annotations

from pathlib import Path

import pytest

from dressage.engine.model import ModelWeights, load_weights
from dressage.model import BUILTIN_TINY, resolve_model_source


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
