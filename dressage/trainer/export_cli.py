"""`dressage export`: a trained version as files another tool loads.

A LoRA job's version is a PEFT adapter directory (`RUN/weights/vN`: `adapter_config.json` +
`adapter_model.safetensors`): `PeftModel.from_pretrained(base, DIR)`, SGLang's
`--lora-paths` and the Hub load it as it is. `dressage export DIR --out OUT` copies it;
`--merge` writes instead a full Hugging Face checkpoint of the base with the adapter merged
into its weights (PEFT's `merge_and_unload`), with the base's tokenizer, for tools that serve no
adapters. The base is `--base`, else the adapter's own `base_model_name_or_path` (the model the
trainer wrapped: the staged model, or the warm start's checkpoint).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from dressage.trainer.lora import ADAPTER_CONFIG, merge_adapter


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("version_dir", type=Path, help="a version's directory (RUN/weights/vN)")
    parser.add_argument("--out", type=Path, required=True, help="where to write (must not exist)")
    parser.add_argument(
        "--merge",
        action="store_true",
        help="write the base with the adapter merged in (a Hugging Face checkpoint)",
    )
    parser.add_argument(
        "--base", default=None, help="the base model directory (default: the adapter's own)"
    )
    parser.add_argument(
        "--dtype", default="bfloat16", choices=("float32", "bfloat16", "float16"),
        help="dtype of a merged checkpoint (default bfloat16)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    source: Path = args.version_dir
    config_file = source / ADAPTER_CONFIG
    if not config_file.is_file():
        print(f"{source}: no {ADAPTER_CONFIG}: not a LoRA version directory", file=sys.stderr)
        return 2
    if args.out.exists():
        print(f"--out {args.out} exists: give a new directory", file=sys.stderr)
        return 2
    if not args.merge:
        shutil.copytree(source, args.out)
        print(f"adapter {source} -> {args.out}")
        return 0
    base = args.base or json.loads(config_file.read_text())["base_model_name_or_path"]
    if not base or not Path(base).is_dir():
        print(f"--base: the base model {base!r} is not a directory here", file=sys.stderr)
        return 2
    merge_adapter(Path(base), source, args.out, args.dtype)
    print(f"merged {source} into {base} -> {args.out} ({args.dtype})")
    return 0
