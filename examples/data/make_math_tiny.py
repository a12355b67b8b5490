"""Writes `math-tiny.jsonl` next to this file: short arithmetic word problems for
`examples/local-math.yaml`, one JSON object per line with `question` and `answer`.

The problems are simple enough for the project's tiny model to learn on a laptop CPU: one-digit
numbers, two kinds (adding and taking away) in a few phrasings, answers from 0 to 18. The file
is deterministic (a fixed seed), so regenerating it changes nothing:

    python examples/data/make_math_tiny.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

ROWS = 256
TEMPLATES = (
    ("Ann has {a} apples and gets {b} more. How many apples now?", "+"),
    ("Bo has {a} cats and finds {b} more. How many cats now?", "+"),
    ("Cy had {a} pens and lost {b}. How many pens are left?", "-"),
    ("Di had {a} eggs and ate {b}. How many eggs are left?", "-"),
)


def rows(seed: int = 0) -> list[dict[str, str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(ROWS):
        template, op = rng.choice(TEMPLATES)
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        if op == "-" and b > a:
            a, b = b, a
        answer = a + b if op == "+" else a - b
        out.append({"question": template.format(a=a, b=b), "answer": str(answer)})
    return out


if __name__ == "__main__":
    path = Path(__file__).with_name("math-tiny.jsonl")
    path.write_text("".join(json.dumps(r) + "\n" for r in rows()), encoding="utf-8")
    print(f"wrote {path} ({ROWS} problems)")
