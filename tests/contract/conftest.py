"""The contract tier imports SGLang's pure-Python modules once, up front: their import
emits deprecation warnings from torch and other dependencies that are SGLang's, not ours,
and the suite turns every warning into an error.

The tier runs in an environment where exactly one SGLang release is importable; the
`sglang_release` fixture names it, so one test body can state what each release does.

Newer releases' `managers/io_struct.py` imports a multimodal config that imports
`torchvision.transforms` (e.g. 0.5.23 `configs/deepseek_ocr.py`, `multimodal/internvl_utils.py`).
No request class uses it, and the PyPI torchvision wheel needs `libtorch_cuda`, so it does not
load beside the CPU torch the tests run. Where torchvision is not installed, a stand-in module
takes its place for the tier: it provides `InterpolationMode` (read at import time) and fails
loudly if anything is called. transformers is told first that torchvision is absent (its
`is_torchvision_available` is cached), so transformers' own image code never sees the stand-in.
"""

from __future__ import annotations

import enum
import importlib
import importlib.util
import sys
import types
import warnings
from typing import Any

import pytest

SGLANG_MODULES = (
    "sglang.srt.sampling.sampling_params",
    "sglang.srt.managers.io_struct",
    "sglang.srt.server_args",
)


class _InterpolationMode(enum.Enum):
    """torchvision's enum, by name only (what SGLang's multimodal configs read at import)."""

    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


def _stand_in(name: str) -> types.ModuleType:
    module = types.ModuleType(name, "Stand-in for torchvision in the contract tier: nothing works.")

    def missing(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)

        def unavailable(*args: object, **kwargs: object) -> None:
            raise RuntimeError(f"{name}.{attr} is a contract-tier stand-in (no torchvision)")

        return unavailable

    module.__getattr__ = missing  # type: ignore[method-assign]
    module.InterpolationMode = _InterpolationMode  # type: ignore[attr-defined]
    return module


def install_torchvision_stand_in() -> None:
    """Put the stand-in in `sys.modules` unless a real torchvision is importable."""
    if importlib.util.find_spec("torchvision") is not None:
        return
    from transformers.utils import import_utils

    import_utils.is_torchvision_available()  # cached: transformers keeps believing it absent
    root, transforms, functional = (
        _stand_in(n)
        for n in ("torchvision", "torchvision.transforms", "torchvision.transforms.functional")
    )
    root.transforms = transforms  # type: ignore[attr-defined]
    transforms.functional = functional  # type: ignore[attr-defined]
    sys.modules.update(
        {m.__name__: m for m in (root, transforms, functional)},
    )


if importlib.util.find_spec("sglang") is not None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        install_torchvision_stand_in()
        for name in SGLANG_MODULES:
            importlib.import_module(name)


@pytest.fixture(scope="session")
def sglang_release() -> str:
    """The SGLang release this run of the tier imports (e.g. `0.5.23`)."""
    from importlib import metadata

    return metadata.version("sglang")
