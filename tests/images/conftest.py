"""The images tier's shared fixture: the images, built once per test module (cached across
modules by `ensure_images`); skipped without podman on a developer machine, failed on CI."""

from __future__ import annotations

import pytest

from .support import Images, ensure_images, require_podman


@pytest.fixture(scope="module")
def images() -> Images:
    require_podman()
    return ensure_images()
