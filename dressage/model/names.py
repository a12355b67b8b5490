"""The names of the built-in models (`builtin:NAME[@SEED]`), torch-free: the proxy reads them
to serve a built-in model's tokenizer without its weights."""

from __future__ import annotations

BUILTIN_PREFIX = "builtin:"
BUILTIN_NAMES = ("tiny", "tiny-moe")
"""The names `builtin:NAME` accepts (all share the tiny model's tokenizer)."""


def parse_builtin(source: str) -> tuple[str, int]:
    """`builtin:NAME[@SEED]` -> (NAME, SEED); ValueError naming the source otherwise."""
    name, _, seed_text = source.removeprefix(BUILTIN_PREFIX).partition("@")
    if name not in BUILTIN_NAMES:
        known = ", ".join(BUILTIN_PREFIX + n for n in BUILTIN_NAMES)
        raise ValueError(f"unknown builtin model {source!r}; known: {known}")
    try:
        seed = int(seed_text) if seed_text else 0
    except ValueError:
        raise ValueError(f"builtin model seed in {source!r} is not an integer") from None
    return name, seed
