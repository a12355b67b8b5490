"""The contract tier imports SGLang's pure-Python modules once, up front (`pytest_configure`,
in each process that runs tests, not in a pytest-xdist controller): their import emits
deprecation warnings from torch and other dependencies that are SGLang's, not ours, and the
suite turns every warning into an error. The tier's engines start forked from a fork server
(`tests/engine_forks.py`), as the integration tier's do.

The tier runs in an environment where exactly one SGLang release is importable; the
`sglang_release` fixture names it, so one test body can state what each release does.

Newer releases' `managers/io_struct.py` imports a multimodal config that imports
`torchvision.transforms` (e.g. 0.5.23 `configs/deepseek_ocr.py`, `multimodal/internvl_utils.py`;
0.5.20's `utils/common.py` also imports `torchvision.io`). No request class uses it, and the
PyPI torchvision wheel needs `libtorch_cuda`, so it does not load beside the CPU torch the tests
run. Where torchvision is not installed, a stand-in answers the import of `torchvision` and of
every module under it: it provides `InterpolationMode` (read at import time) and fails loudly if
anything is called. transformers is told first that torchvision is absent (its
`is_torchvision_available` is cached), so transformers' own image code never sees the stand-in.
The stand-in is active only in the tier: a session that collects tests from outside
`tests/contract/` beside it is refused (`scripts/test.sh` runs the tier in a process of its
own per release).

`scripts/sglang-compat.sh` (and through it `scripts/test.sh`) sets `DRESSAGE_SGLANG_RELEASE`
to the release it means to test: the tier then refuses to start unless exactly that release
is the one importable, so an environment that failed to load never passes as skipped tests.
"""

from __future__ import annotations

import enum
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import re
import sys
import types
import warnings
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from tests.engine_forks import engine_fork_server  # noqa: F401 (every engine forked: see there)

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


class _StandIn(types.ModuleType):
    """A stand-in for torchvision or one of its modules. It provides `InterpolationMode`
    (read at import time); a capitalized attribute is a class that cannot be instantiated,
    any other a stand-in module of its own (so `torchvision.transforms.v2.functional` and
    `from torchvision.io import decode_jpeg` import); calling any of them raises."""

    InterpolationMode = _InterpolationMode

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        where = f"{self.__name__}.{attr}"
        if attr[:1].isupper():

            def refuse(*args: object, **kwargs: object) -> None:
                raise RuntimeError(f"{where} is a contract-tier stand-in (no torchvision)")

            value: Any = type(attr, (), {"__init__": refuse, "__module__": self.__name__})
        else:
            value = importlib.import_module(where)
        setattr(self, attr, value)
        return value

    def __call__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError(f"{self.__name__} is a contract-tier stand-in (no torchvision)")


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers every import of `torchvision` and `torchvision.*` with a `_StandIn`."""

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torchvision" and not fullname.startswith("torchvision."):
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _StandIn(spec.name, "Stand-in for torchvision in the contract tier: nothing works.")

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def install_torchvision_stand_in() -> None:
    """Answer imports of torchvision with the stand-in, unless a real one is importable."""
    if importlib.util.find_spec("torchvision") is not None:
        return
    from transformers.utils import import_utils

    import_utils.is_torchvision_available()  # cached: transformers keeps believing it absent
    _gate_only_torchvision_image_processors(import_utils)
    sys.meta_path.append(_StandInFinder())


TORCHVISION_SUBCLASS = re.compile(r"^class\s+\w+\s*\([^)]*\bTorchvisionBackend\b", re.MULTILINE)
"""transformers 5.25's `_TORCHVISION_BACKEND_SUBCLASS`: a file whose class derives from
`TorchvisionBackend`."""


def _gate_only_torchvision_image_processors(import_utils: types.ModuleType) -> None:
    """Have an older transformers gate on torchvision only the image processors built on it.

    transformers before 5.17 (e.g. 5.12.1, SGLang 0.5.19's pin) makes torchvision a
    requirement of every `image_processing_*` file whose text names `TorchvisionBackend`
    (`BASE_FILE_REQUIREMENTS`), `image_processing_auto` included, which only names it in a
    docstring; later releases require it only of a file with a class derived from it
    (`_TORCHVISION_BACKEND_SUBCLASS`). Without torchvision, the older rule hands SGLang's
    configs a placeholder `AutoImageProcessor` whose `register` raises at import. Where the
    installed transformers has the older rule, the later one is applied: to the lazy modules
    made already (the package's, at its import) and, its cached import structure dropped, to
    those made later."""
    if hasattr(import_utils, "_TORCHVISION_BACKEND_SUBCLASS"):
        return
    table = getattr(import_utils, "BASE_FILE_REQUIREMENTS", {})
    for check, backends in list(table.items()):
        if "torchvision" in backends and check("image_processing_auto", "TorchvisionBackend"):
            del table[check]  # the plain image-processing rule after it applies instead
    for cached in ("create_import_structure_from_path", "define_import_structure"):
        # Lazy modules made later (the package makes its own again) read the rule anew.
        getattr(getattr(import_utils, cached, None), "cache_clear", lambda: None)()
    lazy = getattr(import_utils, "_LazyModule", None)
    for module in list(sys.modules.values()):
        if lazy is None or not isinstance(module, lazy):
            continue
        missing: dict[str, Any] = module._object_missing_backend
        for name, backends in list(missing.items()):
            where = module._class_to_module.get(name)
            if list(backends) != ["torchvision"] or where is None:
                continue
            spec = importlib.util.find_spec(f"{module.__name__}.{where}")
            text = Path(spec.origin).read_text() if spec and spec.origin else ""
            if not TORCHVISION_SUBCLASS.search(text):
                del missing[name]


RELEASE_ENV = "DRESSAGE_SGLANG_RELEASE"
"""Set by `scripts/sglang-compat.sh`: the release this run of the tier must import."""
TIER = Path(__file__).resolve().parent
_stand_in_installed = False


def _check_expected_release() -> None:
    expected = os.environ.get(RELEASE_ENV)
    if not expected:
        return
    where = os.environ.get("PYTHONPATH", "")
    if importlib.util.find_spec("sglang") is None:
        raise pytest.UsageError(
            f"{RELEASE_ENV}={expected}, but SGLang is not importable (PYTHONPATH={where!r}): "
            f"make its environment with `bash scripts/sglang-env.sh {expected}`"
        )
    installed = metadata.version("sglang")
    if installed != expected:
        raise pytest.UsageError(
            f"{RELEASE_ENV}={expected}, but the importable SGLang is {installed} "
            f"(PYTHONPATH={where!r})"
        )


def _import_sglang() -> None:
    global _stand_in_installed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _stand_in_installed = importlib.util.find_spec("torchvision") is None
        install_torchvision_stand_in()
        for name in SGLANG_MODULES:
            try:
                importlib.import_module(name)
            except ModuleNotFoundError as exc:
                release = metadata.version("sglang")
                raise pytest.UsageError(
                    f"SGLang {release}: importing {name} needs {exc.name!r}, which its "
                    f"environment lacks: add the package, pinned, to "
                    f"tests/contract/releases/{release}.txt (or try it with "
                    f"`bash scripts/sglang-compat.sh {release} --with PKG==VERSION`)"
                ) from exc


_check_expected_release()


def pytest_configure(config: pytest.Config) -> None:
    # SGLang's modules take seconds of CPU to import (torch, transformers). A pytest-xdist
    # controller runs no test, so only the processes that do (the workers, or the one process
    # without xdist) import them, before any test module is.
    controller = bool(config.getoption("numprocesses", None)) and not hasattr(config, "workerinput")
    if not controller and importlib.util.find_spec("sglang") is not None:
        _import_sglang()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the torchvision stand-in inside the tier: no other test may run beside it."""
    if not _stand_in_installed:
        return
    outside = sorted({str(i.path) for i in items if TIER not in i.path.parents})
    if outside:
        raise pytest.UsageError(
            "the contract tier's torchvision stand-in is installed, so no test outside "
            f"tests/contract may run in this session ({outside[0]}, ...): run the tier on its "
            "own (`bash scripts/sglang-compat.sh VERSION`)"
        )


@pytest.fixture(scope="session")
def sglang_release() -> str:
    """The SGLang release this run of the tier imports (e.g. `0.5.23`)."""
    return metadata.version("sglang")
