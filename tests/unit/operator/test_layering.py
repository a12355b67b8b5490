"""The operator's layering, read from the import graph (grimp, import-linter's own graph) in
process: the contracts in `pyproject.toml` cover every operator module, and what they promise
holds. `lint-imports` checks the same contracts; these tests also fail when a new module is left
out of the operator's layers."""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[3]
LAYERS = "Operator layers"
PURE = "Below the operator's handlers"


@cache
def _graph() -> grimp.ImportGraph:
    return grimp.build_graph(
        "dressage_operator", "dressage", include_external_packages=True, cache_dir=None
    )


def _contract(prefix: str) -> dict[str, Any]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = [
        c for c in config["tool"]["importlinter"]["contracts"] if c["name"].startswith(prefix)
    ]
    return contract


def _layered() -> set[str]:
    return {module.strip() for layer in _contract(LAYERS)["layers"] for module in layer.split("|")}


def _chains(importer: str, imported: str) -> set[tuple[str, ...]]:
    """The import chains from `importer` to `imported` (packages with their modules); none
    when nothing in the graph imports `imported`."""
    if imported not in _graph().modules:
        return set()
    return _graph().find_shortest_chains(importer=importer, imported=imported, as_packages=True)


def _top_level(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def test_every_operator_module_is_in_a_layer_of_the_contract() -> None:
    modules = {
        _top_level(m)
        for m in _graph().modules
        if m.startswith("dressage_operator.") and not _graph().is_module_squashed(m)
    }
    assert modules - _layered() == set()


@pytest.mark.parametrize("forbidden", ["kopf", "httpx", "kubernetes"])
def test_nothing_below_the_handlers_and_their_io_reaches(forbidden: str) -> None:
    pure = _contract(PURE)["source_modules"]
    assert set(pure) <= _layered()
    for module in pure:
        assert _chains(module, forbidden) == set(), module


def test_the_decision_and_the_builders_are_in_the_pure_contract() -> None:
    pure = set(_contract(PURE)["source_modules"])
    assert {"dressage_operator.decide", "dressage_operator.children"} <= pure
    assert "dressage_operator.handlers" not in pure
    # The graph does see the I/O where it is: the check above is not vacuous.
    assert _chains("dressage_operator.handlers", "httpx") != set()
    assert _chains("dressage_operator.handlers", "kopf") != set()


@pytest.mark.parametrize(
    "forbidden", ["torch", "transformers", "dressage.trainer", "dressage.engine"]
)
def test_the_operator_never_imports_torch_or_the_trainer_or_engine(forbidden: str) -> None:
    assert _chains("dressage_operator", forbidden) == set()
