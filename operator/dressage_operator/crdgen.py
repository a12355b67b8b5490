"""`python -m dressage_operator.crdgen [--check]`: write or check the CRD under `crds/`.

The CRD is generated from the job model (`dressage.api.crd`); `--check` exits 1 when the file
on disk differs (`tests/unit/api/test_crd.py` runs it). The chart carries a byte-for-byte copy
(`scripts/sync-chart-crds.sh`), compared by `tests/chart/test_crds_in_step.py`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dressage.api.crd import CRD_FILE, render_crd

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "crds"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dressage_operator.crdgen")
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_DIR, help="directory of CRDs")
    parser.add_argument("--check", action="store_true", help="fail if the file is out of date")
    args = parser.parse_args(argv)
    path = args.out_dir / CRD_FILE
    text = render_crd()
    if args.check:
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current != text:
            print(f"{path} is out of date: run scripts/gen-crds.sh", file=sys.stderr)
            return 1
        print(f"{path} is up to date")
        return 0
    args.out_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
