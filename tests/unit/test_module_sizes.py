"""No module over 600 lines: a module that grows past it is split by responsibility, not
trimmed line by line. The limit covers the runtime, the operator, the benchmarks, the scripts
and the tests alike."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIMIT = 600
"""Most lines a Python module may have."""
TREES = ("dressage", "operator", "benchmarks", "scripts", "tests")
"""Directories, relative to the repository, whose Python modules the limit covers."""


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_module_is_over_the_line_limit() -> None:
    modules = sorted(path for tree in TREES for path in (REPO / tree).rglob("*.py"))
    assert modules, "no modules found; the trees moved?"
    over = {
        str(path.relative_to(REPO)): lines
        for path in modules
        if (lines := line_count(path)) > LIMIT
    }
    assert not over, f"modules over {LIMIT} lines (split them by responsibility): {over}"
