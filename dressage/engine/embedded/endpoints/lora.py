"""`/load_lora_adapter` and `/unload_lora_adapter`: LoRA adapters served by name, as SGLang
serves them (`dressage.engine.lora` quotes the release code).

A load reads the PEFT directory into a weight set that shares the base's tensors, off the event
loop (`dressage.engine.embedded.model.lora`), then registers it between two scheduler steps: from
then on a `/generate` naming it in `lora_path` runs with it. Generation is not paused: a load
or an unload never touches a request that does not name the adapter. An unload refuses the
name to new requests at once and answers once no request in flight uses the adapter. Both
answer `LoRAUpdateResult`: `success`, `error_message`, `loaded_adapters` (`{name: path}`),
HTTP 200, or 400 with `success: false`.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from dressage.asgi import Answer, HttpRequest, json_response
from dressage.engine.embedded.endpoints.common import parse, read_body
from dressage.engine.embedded.endpoints.state import EngineState
from dressage.engine.embedded.model.lora import with_adapter
from dressage.engine.lora import LoadLoRAAdapterRequest, UnloadLoRAAdapterRequest


def _answer(success: bool, adapters: dict[str, str], message: str = "") -> Answer:
    body = {"success": success, "error_message": message, "loaded_adapters": adapters}
    return json_response(body, 200 if success else 400)


NOT_ENABLED_MESSAGE = "LoRA is not enabled. Please set `--enable-lora` to enable LoRA."
"""0.5.2 `TokenizerManager.load_lora_adapter` without `--enable-lora`."""


def _refusal(state: EngineState, adapter_dir: Path) -> str | None:
    serving = state.config.lora
    if serving is None:
        return NOT_ENABLED_MESSAGE
    config = json.loads((adapter_dir / "adapter_config.json").read_text(encoding="utf-8"))
    modules = config.get("target_modules") or []
    return serving.refusal(int(config["r"]), set(modules))


async def load_lora_adapter(state: EngineState, request: HttpRequest) -> Answer:
    req = parse(LoadLoRAAdapterRequest, await read_body(request))
    scheduler = state.scheduler
    base = scheduler.weights
    if base is None:
        return _answer(False, dict(scheduler.adapters.paths), "the base weights are not loaded")
    try:
        refused = _refusal(state, Path(req.lora_path))
        if refused is not None:
            return _answer(False, dict(scheduler.adapters.paths), refused)
        served = await asyncio.to_thread(with_adapter, Path(req.lora_path), base)
        adapters = await asyncio.wrap_future(
            scheduler.adapter_command(
                "lora_load", name=req.lora_name, path=req.lora_path, weights=served
            )
        )
    except (ValueError, OSError, KeyError) as exc:
        message = f"Failed to load LoRA adapter {req.lora_name} from {req.lora_path}: {exc}"
        return _answer(False, dict(scheduler.adapters.paths), message)
    return _answer(True, adapters)


async def unload_lora_adapter(state: EngineState, request: HttpRequest) -> Answer:
    req = parse(UnloadLoRAAdapterRequest, await read_body(request))
    scheduler = state.scheduler
    try:
        waiting = await asyncio.wrap_future(
            scheduler.adapter_command("lora_unload", name=req.lora_name)
        )
    except ValueError as exc:
        return _answer(False, dict(scheduler.adapters.paths), str(exc))
    return _answer(True, await asyncio.wrap_future(waiting))
