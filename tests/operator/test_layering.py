"""Layering: the operator imports neither torch nor the trainer or engine internals."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHECK = """
import sys
import dressage_operator.main, dressage_operator.handlers, dressage_operator.crdgen
banned = [m for m in sys.modules
          if m == "torch" or m.startswith(("torch.", "dressage.trainer", "dressage.engine"))]
assert not banned, banned
"""


def test_operator_never_imports_torch_or_the_trainer() -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'operator'}"}
    done = subprocess.run(
        [sys.executable, "-c", CHECK],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
