"""The wheel built from the repository holds the product only, and the product's imports resolve
from what the wheel declares.

The wheel is built as a user's `pip wheel` builds it (the project's build backend, offline,
into a temporary directory) and read as a zip: every module in it is parsed, and every import
in it, at module level or inside a function (the runtime imports many modules lazily), must be
the standard library's, the product's own (`dressage`, `dressage_operator`), or a module of a
distribution the wheel requires, unconditionally or through one of its extras; the `dev`
extra does not count, it is the tests' world. The test support (`dressage_testkit`, the fork
server, the Kubernetes API emulation) is a package of its own and never in the wheel.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from email.parser import Parser

import pytest
from packaging.requirements import Requirement

from tests.chart.tools import ROOT

PRODUCT = {"dressage", "dressage_operator"}
TEST_ONLY = {"pytest", "hypothesis", "kmock", "looptime", "dressage_testkit", "_pytest"}
"""Modules no file of the wheel may import, whatever the environment provides."""
TESTS_EXTRA = "dev"


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    offline = ["--no-deps", "--no-build-isolation", "--no-index", "--disable-pip-version-check"]
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", *offline, "--quiet", "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (path,) = out.glob("dressage-*.whl")
    return zipfile.ZipFile(path)


def modules(wheel: zipfile.ZipFile) -> Iterator[tuple[str, ast.Module]]:
    for name in wheel.namelist():
        if name.endswith(".py"):
            yield name, ast.parse(wheel.read(name), name)


def imported(tree: ast.Module) -> set[str]:
    """Top-level names of the modules `tree` imports absolutely."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def declared(wheel: zipfile.ZipFile) -> dict[str, set[str]]:
    """The distributions the wheel requires, by the extra that brings each ("" for the core)."""
    (metadata,) = (n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    message = Parser().parsestr(wheel.read(metadata).decode())
    by_extra: dict[str, set[str]] = {}
    for line in message.get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        extra = re.search(r"extra == ['\"]([^'\"]+)", str(requirement.marker or ""))
        by_extra.setdefault(extra[1] if extra else "", set()).add(_name(requirement.name))
    return by_extra


def test_the_wheel_holds_the_product_and_no_test_support(wheel: zipfile.ZipFile) -> None:
    packages = {name.split("/")[0] for name in wheel.namelist() if "dist-info" not in name}
    assert packages == PRODUCT
    support = [
        name
        for name in wheel.namelist()
        if re.search(r"(^|/)(testing|testkit|dressage_testkit|forkserver\w*)(/|\.py$)", name)
    ]
    assert support == []


def test_no_module_of_the_wheel_imports_test_support(wheel: zipfile.ZipFile) -> None:
    """kmock, pytest, hypothesis, looptime and the test support are the tests' own: an import
    of one, even lazy, breaks the product where only the wheel is installed (an image)."""
    offenders = {name: sorted(imported(tree) & TEST_ONLY) for name, tree in modules(wheel)}
    assert {name: found for name, found in offenders.items() if found} == {}


def test_every_import_of_the_wheel_resolves_from_what_it_declares(
    wheel: zipfile.ZipFile,
) -> None:
    """An import is the standard library's, the product's own, or a module of a distribution
    the wheel requires (its core or a product extra: train, operator, tracking); a module only
    a transitive dependency or the `dev` extra provides is not declared."""
    requires = declared(wheel)
    assert set(requires) >= {"", "train", "operator", TESTS_EXTRA}
    product_dists = set().union(*(d for extra, d in requires.items() if extra != TESTS_EXTRA))
    providers = md.packages_distributions()
    undeclared: dict[str, list[str]] = {}
    for name, tree in modules(wheel):
        for module in sorted(imported(tree) - PRODUCT - set(sys.stdlib_module_names)):
            dists = {_name(d) for d in providers.get(module, [])}
            if not dists & product_dists:
                undeclared.setdefault(module, []).append(name)
    assert undeclared == {}, {
        module: f"{sorted(providers.get(module, [])) or 'not installed'}, imported by {files}"
        for module, files in undeclared.items()
    }
