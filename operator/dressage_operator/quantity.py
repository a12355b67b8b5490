"""Kubernetes resource quantities (`500m`, `64Gi`, `1e3`): the grammar of
`k8s.io/apimachinery/pkg/api/resource` and their values, for the operator's drift check (the
API server normalises quantities, so `0.5` and `500m` are the same) and the API emulation's
validation."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))([KMGTPE]i|[mkMGTPE]|[eE][+-]?\d+)?$")
_SUFFIX = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    **{s: Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
}


def parse_quantity(text: str) -> Decimal | None:
    """The value of a Kubernetes quantity (`500m` -> 0.5, `1Gi` -> 1073741824), None when
    `text` is not one."""
    match = QUANTITY.match(text)
    if match is None:
        return None
    number, suffix = match.group(1), match.group(2) or ""
    try:
        if suffix[:1] in ("e", "E"):
            return Decimal(number) * Decimal(10) ** int(suffix[1:])
        return Decimal(number) * _SUFFIX[suffix]
    except InvalidOperation:
        return None
