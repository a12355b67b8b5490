"""`python -m dressage` is the `dressage` command."""

from dressage.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
