"""SGLang's LoRA adapter API as Dressage calls it: load an adapter by name, unload it, generate
with it.

Read at both ends of the tested range (`python/sglang/srt/entrypoints/http_server.py` and
`srt/managers/io_struct.py`):

- `POST /load_lora_adapter` takes `LoadLoRAAdapterReqInput` (0.5.2 a dataclass, 0.5.23 a msgspec
  struct, the same fields): `lora_name: str` ("The name of the lora module to newly loaded"),
  `lora_path: str` ("The path of loading"), `pinned: bool = False`, `lora_id` (filled by the
  tokenizer manager). It answers `LoRAUpdateResult` / `LoRAUpdateOutput`: `success`,
  `error_message`, `loaded_adapters` (`{lora_name: lora_path}` of every loaded adapter,
  `LoRAManager.create_lora_update_result`), with HTTP 200 on success and 400 otherwise.
- `POST /unload_lora_adapter` takes `UnloadLoRAAdapterReqInput`: `lora_name`, `lora_id`. The
  tokenizer manager unregisters the name at once (no new request may use it) and then waits
  until no request in flight uses the adapter (`LoRARegistry.wait_for_unload`: "Waits until the
  usage counter for a LoRA adapter reaches zero"), so an unload never cuts a generation short.
- `POST /load_lora_adapter_from_tensors` (0.5.23 only, `LoadLoRAAdapterFromTensorsReqInput`:
  `lora_name`, `config_dict` (the PEFT `adapter_config.json`), `serialized_named_tensors` (one
  serialized copy per TP rank), `pinned`, ...): the same answer.
- `/generate` names the adapter in `GenerateReqInput.lora_path` (a name, despite the field's
  name: the tokenizer manager does `lora_registry.acquire(obj.lora_path)`, which looks names up);
  a request without it runs on the base weights.

A server serves adapters only when started with `--enable-lora` (with `--max-lora-rank` and
`--lora-target-modules` when no `--lora-paths` is given, 0.5.23 `LoRAManager`: "When no initial
--lora-paths is provided, you need to specify both --max-lora-rank and --lora-target-modules").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dressage.engine.errors import EngineRequestError
from dressage.engine.protocol import RequestModel

if TYPE_CHECKING:
    from dressage.engine.client import EngineClient

LOAD_LORA_ADAPTER = "/load_lora_adapter"
UNLOAD_LORA_ADAPTER = "/unload_lora_adapter"
LOAD_LORA_ADAPTER_FROM_TENSORS = "/load_lora_adapter_from_tensors"


class LoadLoRAAdapterRequest(RequestModel):
    """SGLang's `LoadLoRAAdapterReqInput` (0.5.2 and 0.5.23 alike)."""

    lora_name: str
    lora_path: str
    pinned: bool = False
    lora_id: str | None = None


class UnloadLoRAAdapterRequest(RequestModel):
    """SGLang's `UnloadLoRAAdapterReqInput`."""

    lora_name: str
    lora_id: str | None = None


def load_body(lora_name: str, lora_path: str) -> dict[str, Any]:
    """`LoadLoRAAdapterReqInput` for adapter directory `lora_path` under `lora_name`."""
    if not lora_name:
        raise ValueError("lora_name must not be empty")
    return LoadLoRAAdapterRequest(lora_name=lora_name, lora_path=lora_path).model_dump(
        exclude_defaults=True
    )


def unload_body(lora_name: str) -> dict[str, Any]:
    """`UnloadLoRAAdapterReqInput` for `lora_name`."""
    return UnloadLoRAAdapterRequest(lora_name=lora_name).model_dump(exclude_defaults=True)


def loaded_adapters(answer: Any, url: str) -> dict[str, str]:
    """`loaded_adapters` of a `LoRAUpdateResult` answer; raises `EngineRequestError` with the
    engine's `error_message` when `success` is false."""
    if not isinstance(answer, dict) or not answer.get("success"):
        message = answer.get("error_message") if isinstance(answer, dict) else answer
        raise EngineRequestError(f"LoRA adapter update failed: {message}", url=url, status_code=200)
    adapters = answer.get("loaded_adapters") or {}
    return {str(k): str(v) for k, v in adapters.items()}


async def load_lora_adapter(
    client: EngineClient, lora_name: str, lora_path: str, *, timeout_s: float | None = None
) -> dict[str, str]:
    """Load the PEFT adapter directory `lora_path` as `lora_name`; the adapters then loaded."""
    body = load_body(lora_name, lora_path)
    answer = await client.post(LOAD_LORA_ADAPTER, body, timeout_s=timeout_s)
    return loaded_adapters(answer, client.base_url)


async def unload_lora_adapter(
    client: EngineClient, lora_name: str, *, timeout_s: float | None = None
) -> dict[str, str]:
    """Unload `lora_name` once no request in flight uses it; the adapters then loaded."""
    answer = await client.post(UNLOAD_LORA_ADAPTER, unload_body(lora_name), timeout_s=timeout_s)
    return loaded_adapters(answer, client.base_url)
