"""Layering: the proxy never imports torch (its image does not ship it)."""

from __future__ import annotations

import subprocess
import sys


def test_proxy_server_and_cli_leave_torch_out() -> None:
    code = (
        "import sys\n"
        "import dressage.proxy.server, dressage.proxy.cli, dressage.proxy.openai.chat\n"
        "from dressage.proxy.openai.chat import load_chat_tokenizer\n"
        "load_chat_tokenizer('builtin:tiny')\n"
        "bad = sorted(m for m in ('torch', 'transformers') if m in sys.modules)\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
