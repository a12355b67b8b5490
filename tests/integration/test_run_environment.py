"""The local run's modules, loaded for real: every module of the `dressage` package imported in
a fresh interpreter (what `dressage run` and its engines, proxy and trainer processes import,
lazy imports included) loads no module of a test-only distribution (`tests/unit/test_install.py`
says which those are) and none of the test support (`dressage_testkit`, which the suite's
environment names as the launcher's spawner)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.unit.test_install import forbidden_modules

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """\
import importlib, json, pkgutil, sys
import dressage, dressage.cli
dressage.cli.build_parser(["run"])
for m in pkgutil.walk_packages(dressage.__path__, "dressage."):
    importlib.import_module(m.name)
print(json.dumps(sorted({n.split(".")[0] for n in sys.modules})))
"""


def test_the_runs_modules_load_no_test_only_package() -> None:
    forbidden = forbidden_modules()
    assert {"pytest", "hypothesis", "kmock", "mypy", "openai"} <= forbidden
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = set(json.loads(done.stdout.splitlines()[-1]))
    assert "torch" in loaded
    assert not loaded & (forbidden | {"dressage_testkit"})
