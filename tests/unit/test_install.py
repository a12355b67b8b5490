"""What each install holds: the local run's environment (`pip install .[train]`, made by
`scripts/setup-run.sh` for `scripts/run-local.sh`) needs and imports no package that only the
tests use, and the project ships its license.

The test-only distributions are the `dev` extra's dependency closure less that of the core and
every other extra, read from the installed packages' metadata, so a package added to `dev`
is checked without touching this file."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import tomllib
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXTRAS: dict[str, list[str]] = PROJECT["optional-dependencies"]


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(requirements: Iterable[str]) -> set[str]:
    """The installed distributions `requirements` need, transitively (markers evaluated for
    this interpreter; a requirement's own extras followed)."""
    seen: set[str] = set()
    todo = [(Requirement(r), "") for r in requirements]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = _name(req.name)
        wanted = [(name, "")] + [(name, e) for e in req.extras]
        for dist_name, dist_extra in wanted:
            key = f"{dist_name}[{dist_extra}]"
            if key in seen:
                continue
            seen.add(key)
            try:
                dist = md.distribution(dist_name)
            except md.PackageNotFoundError:
                continue  # a marker-less optional that this machine does not have
            todo.extend((Requirement(r), dist_extra) for r in dist.requires or [])
    return {k.split("[")[0] for k in seen}


def _installed(names: set[str]) -> set[str]:
    out = set()
    for name in names:
        try:
            md.distribution(name)
        except md.PackageNotFoundError:
            continue
        out.add(name)
    return out


def _test_only() -> set[str]:
    """Distributions only the tests need: the `dev` closure less the product's."""
    product = closure(
        PROJECT["dependencies"] + [r for e, rs in EXTRAS.items() if e != "dev" for r in rs]
    )
    return _installed(closure(EXTRAS["dev"]) - product)


def test_the_train_extra_needs_no_dev_package() -> None:
    """`pip install .[train]` pulls in none of the `dev` extra's packages (pytest, hypothesis,
    kmock, mypy, ruff, openai, ...), directly or through a dependency."""
    run_env = closure(PROJECT["dependencies"] + EXTRAS["train"])
    dev = {_name(Requirement(r).name) for r in EXTRAS["dev"]}
    assert "torch" in run_env
    assert not run_env & dev
    assert not run_env & _test_only()


def forbidden_modules() -> set[str]:
    """Top-level module names of the test-only distributions installed here."""
    test_only = _test_only()
    return {
        module
        for module, dists in md.packages_distributions().items()
        if any(_name(d) in test_only for d in dists)
    }


def _imported(path: Path) -> set[str]:
    """Top-level names of every module `path` imports, at module level or inside a function
    (the runtime imports many modules lazily)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_no_module_of_the_runtime_imports_a_test_only_package() -> None:
    """No file of the `dressage` package (the run's engines, proxy, trainer and report among
    them) imports a test-only package, even lazily; tests/integration/test_run_environment.py
    imports them all in a fresh interpreter."""
    forbidden = forbidden_modules()
    assert {"pytest", "hypothesis", "kmock", "mypy", "openai"} <= forbidden
    offenders = {
        str(path.relative_to(ROOT)): sorted(_imported(path) & forbidden)
        for path in sorted((ROOT / "dressage").rglob("*.py"))
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_local_run_sets_up_its_own_environment_without_the_tests_world() -> None:
    """`scripts/run-local.sh` installs through `scripts/setup-run.sh` (CPU torch at the tests'
    pin and `.[train]`), never `scripts/setup.sh` (dev extras, triton, SGLang environments),
    and says how much it installed."""
    run_local = (ROOT / "scripts" / "run-local.sh").read_text()
    setup_run = (ROOT / "scripts" / "setup-run.sh").read_text()
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert "scripts/setup-run.sh" in run_local
    assert "bash scripts/setup.sh" not in run_local
    assert ".venv-run/bin/dressage run" in run_local
    pin = re.findall(r'"torch==[\d.]+"', setup)
    assert pin
    assert re.findall(r'"torch==[\d.]+"', setup_run) == pin
    installs = re.findall(r"pip_install (.+)", setup_run)
    assert installs == [pin[0], '-e ".[train]"']
    assert "du -sh" in setup_run
    for word in ("triton", "sglang", "dev"):
        assert word not in " ".join(installs)


def test_the_license_is_the_apache_2_0_text_pyproject_names() -> None:
    assert PROJECT["license"] == {"text": "Apache-2.0"}
    text = (ROOT / "LICENSE").read_text()
    assert " ".join(text.split()[:4]) == "Apache License Version 2.0,"
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    for section in range(1, 10):
        assert f"\n   {section}. " in text
    assert "END OF TERMS AND CONDITIONS" in text
