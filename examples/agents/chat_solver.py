"""A blackbox agent: an ordinary program that only speaks the OpenAI chat API.

It plays the role OpenCode plays in the reference experiments: Dressage does not import, patch
or wrap it. The harness starts it once per trajectory with the standard OpenAI environment
variables (`OPENAI_BASE_URL` pointing at the rollout proxy, `OPENAI_API_KEY`) and the task on
standard input, and reads the final answer from standard output.

Behaviour: ask the model the question; if the reply does not end in a number, ask once more
for the number alone (a second chat turn in the same conversation); print the last number seen.
"""

from __future__ import annotations

import os
import re
import sys

from openai import OpenAI

NUMBER = re.compile(r"(-?\d+)\s*$")


def main() -> int:
    question = sys.stdin.read().strip()
    client = OpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"])
    model = os.environ.get("OPENAI_MODEL", "policy")
    max_tokens = int(os.environ.get("AGENT_MAX_TOKENS", "8"))
    messages: list[dict[str, str]] = [{"role": "user", "content": question}]
    answer = ""
    for _ in range(2):
        reply = client.chat.completions.create(
            model=model,
            messages=messages,  # type: ignore[arg-type]
            max_tokens=max_tokens,
            temperature=float(os.environ.get("AGENT_TEMPERATURE", "1.0")),
        )
        content = reply.choices[0].message.content or ""
        messages.append({"role": "assistant", "content": content})
        match = NUMBER.search(content.strip())
        if match:
            answer = match.group(1)
            break
        messages.append({"role": "user", "content": "number only"})
    print(answer)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
