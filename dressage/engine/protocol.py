"""Typed shapes of the SGLang HTTP API subset that Dressage uses.

Matched against SGLang's `python/sglang/srt/managers/io_struct.py`,
`python/sglang/srt/entrypoints/http_server.py`, `python/sglang/srt/sampling/sampling_params.py`
and `python/sglang/srt/utils/weight_versions.py` (the `GenerateReqInput` /
`UpdateWeightFromDiskReqInput` / `PauseGenerationReqInput` / `AbortReq` request classes and
`meta_info` as built by the TokenizerManager). The models describe the newest API Dressage uses
(every feature of `sglang_support.FEATURES`, all present in SGLang 0.5.23); which release has
which field is in `sglang_support`, and `EngineClient` sends a field only to a release that has
it. The contract tier (`tests/contract/`) checks the bodies against each tested release's own
classes. Field names and defaults are SGLang's; a field SGLang has but Dressage does not use is
left out of the request models, and unknown fields in requests are refused (the embedded engine
answers 400 naming the field; SGLang's FastAPI layer drops unknown top-level fields silently)
rather than silently ignored. Response models allow extra fields, so newer SGLang servers still
parse.

Endpoints (all JSON; where a route moved between releases, both names, newest first):

- `POST /generate` `GenerateRequest` -> `GenerateResponse`; with `stream: true` a server-sent
  event stream of `data: {GenerateResponse}` lines ended by `data: [DONE]` (text, logprobs and
  `completion_tokens` cumulative; `output_ids` all so far on 0.5.23, only the new ones on
  0.5.2, which `EngineClient.generate_stream` accumulates).
- `POST /update_weights_from_disk` `UpdateWeightsFromDiskRequest` -> `UpdateWeightsResult`
  (HTTP 400 with `success: false` when the load, or on 0.5.23 its cache flush, fails).
- `POST /init_weights_update_group` `InitWeightsUpdateGroupRequest`,
  `POST /begin_weight_update` `BeginWeightUpdateRequest` (0.5.23),
  `POST /update_weights_from_distributed` `UpdateWeightsFromDistributedRequest`,
  `POST /end_weight_update` `EndWeightUpdateRequest` (0.5.23),
  `POST /destroy_weights_update_group` `DestroyWeightsUpdateGroupRequest` (0.5.3) ->
  `WeightsGroupResult` `{"success", "message"}` (HTTP 400 with `success: false` on failure):
  weights broadcast by the trainer (rank 0 of a `torch.distributed` group) instead of read
  from disk.
- `GET|POST /flush_cache` -> 200 once flushed, 400 while requests run (plain text).
- `POST /pause_generation` `PauseGenerationRequest`, `POST /continue_generation` ->
  `{"message": ..., "status": "ok"}`.
- `POST /abort_request` `AbortRequest` -> empty 200.
- `GET /model_info` (0.5.23) or `GET /get_weight_version` (0.5.2) -> `{"weight_version": ...}`
  (among other keys); `GET /model_info` or `GET /get_model_info` -> `ModelInfo`;
  `GET /server_info` or `GET /get_server_info` -> the server's settings with `version`, its
  SGLang release (0.5.23 keeps the `get_` names as aliases that log a warning per call).
- `GET /health`, `GET /health_generate` -> 200 when ready, 503 otherwise (empty bodies).
- Errors: HTTP 400 with `{"error": {"message": "..."}}` (SGLang's `_create_error_response`);
  0.5.23's `/generate` schema gate answers 400 `{"error": "<text>"}`; on 0.5.2 a
  `sampling_params` key its `SamplingParams` does not take, or a value of the wrong type, is a
  `TypeError` and answers HTTP 500 `Internal Server Error` (plain text). Some SGLang errors use
  the flat OpenAI shape `{"object": "error", "message": ..., "code": 400}`; `error_message`
  reads them all.

Finish reasons are SGLang's `to_json()` shapes: `{"type": "stop", "matched": <token id or
string>}`, `{"type": "length", "length": n}`, `{"type": "abort", "message": ...}`.
`output_token_logprobs` is a list of `[logprob, token_id, text_or_null]` (text only when
`return_text_in_logprobs`).

Routed experts (MoE models, SGLang 0.5.7 and later, `sglang_support.ROUTED_EXPERTS`): with
`return_routed_experts`, `meta_info.routed_experts` of a finished generation is the base64 of
an int32 array `[prompt + output - 1 - routed_experts_start_len, num_hidden_layers,
num_experts_per_tok]`, row `t` the experts token `routed_experts_start_len + t` of prompt +
output was routed to in each layer (`dressage.data.expert_routing`). Older releases ignore the
field.

Weight versions. `meta_info.weight_version` is the version label of the weights that produced
the response (SGLang: the server's version when the response was built).
`meta_info.weight_versions` is a list of spans `{"version": v, "start": s, "end": e}` over output
token indices `[s, e)`, in order, covering every output token: the tokens of one response that
came from different weight versions (a weight update landed mid-generation, which an
`in_place` pause allows). SGLang emits the field from 0.5.19 (`add_weight_versions_to_meta_info`,
which also sets `weight_version` to the last span's); older releases send only
`weight_version`, so `GenerateResponse.token_versions()` falls back to that label for every
token.

No torch here: the proxy imports this module and its image has no torch.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dressage.api.sglang import NULL_DEFAULT_KEYS
from dressage.data.expert_routing import RoutedExperts
from dressage.data.spans import expand_version_spans, spans_from_sglang

UNKNOWN_VERSION = "unknown"
"""Version label reported for tokens whose version the server did not send."""


class RequestModel(BaseModel):
    """A request body: unknown fields are an error naming the field."""

    model_config = ConfigDict(extra="forbid")


class ResponseModel(BaseModel):
    """A response body: extra fields from newer servers are kept, not refused."""

    model_config = ConfigDict(extra="allow")


class SamplingParams(RequestModel):
    """SGLang's `sampling_params` (names, defaults and ranges as in its `SamplingParams.verify`).

    The keys are the newest tested release's (0.5.23's API schema); which release takes which
    key is `sglang_support.sampling_param_keys`, and the client and the proxy send an engine
    only the keys its release takes. `null` means the default, as 0.5.23's schema decoder
    reads it (`max_new_tokens: null` is no limit, as in every release); for an engine of an
    older release, whose `SamplingParams` compares the value and fails, such nulls are left out
    of the request (`sglang_support.NULL_REFUSING_KEYS`); which nulls mean the default is
    `NULL_DEFAULT_KEYS` (`dressage.api.sglang`).

    The embedded engine implements max_new_tokens, min_new_tokens, temperature, top_p, top_k,
    min_p, stop, stop_regex, stop_token_ids, ignore_eos, skip_special_tokens, no_stop_trim and
    sampling_seed; it accepts the penalties, `n`, `logit_bias`, the grammar fields,
    `beam_width` and `watermark` only at their neutral values and answers 400 otherwise.

    Types are strict (an int is a valid float, nothing else converts): SGLang takes these
    values as they come and fails on a string where it compares a number, so a body the
    embedded engine accepts must be one SGLang accepts too.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    max_new_tokens: int | None = Field(default=128, ge=0)
    """Maximum number of output tokens (None: until eos or the context length)."""
    min_new_tokens: int = Field(default=0, ge=0)
    """Stop tokens are masked until this many tokens were generated."""
    temperature: float = Field(default=1.0, ge=0.0)
    """0 means greedy decoding."""
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = -1
    """-1 disables top-k."""
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    stop: str | list[str] | None = None
    """Stop strings; the matched string is trimmed from `text` unless `no_stop_trim`."""
    stop_regex: str | list[str] | None = None
    """Stop when the output text matches one of these regular expressions (0.5.23); the
    matched text is trimmed from `text` unless `no_stop_trim`."""
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    sampling_seed: int | None = None
    """Per-request seed; with the engine seed it fixes the sampled tokens."""
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    repetition_penalty: float = Field(default=1.0, gt=0.0, le=2.0)
    n: int = Field(default=1, ge=1)
    logit_bias: dict[str, float] | None = None
    regex: str | None = None
    json_schema: str | None = None
    ebnf: str | None = None
    structural_tag: str | None = None
    custom_params: dict[str, Any] | None = None
    stream_interval: int | None = Field(default=None, ge=1)
    beam_width: int | None = Field(default=None, ge=1)
    watermark: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _null_is_the_default(cls, data: Any) -> Any:
        if isinstance(data, dict) and any(v is None for v in data.values()):
            return {k: v for k, v in data.items() if v is not None or k not in NULL_DEFAULT_KEYS}
        return data

    @field_validator("top_k")
    @classmethod
    def _top_k_range(cls, value: int) -> int:
        if value < 1 and value != -1:
            raise ValueError(f"top_k must be -1 (disable) or at least 1, got {value}.")
        return value

    @model_validator(mode="after")
    def _min_le_max(self) -> SamplingParams:
        if self.max_new_tokens is not None and self.min_new_tokens > self.max_new_tokens:
            raise ValueError(
                f"min_new_tokens must be in [0, max_new_tokens({self.max_new_tokens})], "
                f"got {self.min_new_tokens}."
            )
        return self

    def stop_strings(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def stop_regexes(self) -> list[str]:
        if self.stop_regex is None:
            return []
        return [self.stop_regex] if isinstance(self.stop_regex, str) else list(self.stop_regex)


class GenerateRequest(RequestModel):
    """SGLang's `GenerateReqInput` for one prompt (Dressage never sends batches)."""

    text: str | None = None
    """The prompt as text (tokenized by the server); give this or `input_ids`."""
    input_ids: list[int] | None = None
    """The prompt as token ids."""
    sampling_params: SamplingParams = Field(default_factory=SamplingParams)
    return_logprob: bool = False
    """Return `meta_info.output_token_logprobs`."""
    logprob_start_len: int = -1
    """SGLang's prompt-logprob start; Dressage uses only -1 (output tokens only)."""
    top_logprobs_num: int = Field(default=0, ge=0)
    return_text_in_logprobs: bool = False
    stream: bool = False
    rid: str | None = None
    """Request id, used by `/abort_request`; the server makes one up when absent."""
    log_metrics: bool = True
    return_routed_experts: bool = False
    """Return `meta_info.routed_experts` (MoE models; SGLang 0.5.7 and later, on a server
    started with `--enable-return-routed-experts`)."""
    routed_experts_start_len: int = Field(default=0, ge=0)
    """The first token whose routing is returned (0: from the prompt's first token); at most
    the prompt's length."""
    lora_path: str | None = None
    """The name of a loaded LoRA adapter to generate with (`/load_lora_adapter`'s `lora_name`:
    SGLang's `GenerateReqInput.lora_path`, looked up by name in its LoRA registry, 0.5.2 and
    0.5.23); unset: the base weights."""

    @field_validator("input_ids", mode="before")
    @classmethod
    def _single_prompt(cls, value: Any) -> Any:
        if isinstance(value, list) and value and isinstance(value[0], list):
            raise ValueError("batched input_ids (a list of lists) are not supported; send one")
        return value

    @model_validator(mode="after")
    def _one_prompt(self) -> GenerateRequest:
        if self.text is None and self.input_ids is None:
            raise ValueError("Either text or input_ids should be provided.")
        if self.text is not None and self.input_ids is not None:
            raise ValueError("Provide either text or input_ids, not both.")
        if self.input_ids is not None and not self.input_ids:
            raise ValueError("input_ids cannot be empty.")
        return self

    def to_json(self) -> dict[str, Any]:
        """The request body: only fields the caller set (SGLang fills its own defaults)."""
        body = self.model_dump(exclude_unset=True)
        body["sampling_params"] = self.sampling_params.model_dump(exclude_unset=True)
        return body


class FinishReason(ResponseModel):
    """Why a generation ended (SGLang's `FINISH_*` `to_json()`)."""

    type: Literal["stop", "length", "abort"]
    matched: int | str | list[int] | None = None
    """The stop token id or stop string that ended a `stop`."""
    length: int | None = None
    """The output length of a `length` finish."""
    message: str | None = None
    """Why an `abort` happened."""
    status_code: int | None = None
    err_type: str | None = None


class WeightVersionSpan(ResponseModel):
    """Output tokens `[start, end)` of a response were produced by weights `version`."""

    version: str
    start: int = Field(ge=0)
    end: int = Field(ge=0)


class MetaInfo(ResponseModel):
    """`meta_info` of a generate response."""

    id: str
    finish_reason: FinishReason | None = None
    """None only in intermediate stream snapshots."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    weight_version: str | None = None
    weight_versions: list[WeightVersionSpan] | None = None
    output_token_logprobs: list[tuple[float, int, str | None]] | None = None
    e2e_latency: float | None = None
    routed_experts: str | None = None
    """With `return_routed_experts`: the base64 int32 routing of the forwarded tokens."""


class GenerateResponse(ResponseModel):
    """A generate response (or one stream snapshot)."""

    text: str = ""
    output_ids: list[int] = Field(default_factory=list)
    meta_info: MetaInfo

    @property
    def finished(self) -> bool:
        return self.meta_info.finish_reason is not None

    @property
    def aborted(self) -> bool:
        reason = self.meta_info.finish_reason
        return reason is not None and reason.type == "abort"

    def routed_experts(self, start_len: int = 0) -> RoutedExperts | None:
        """The routing of prompt + output tokens `[start_len, prompt + output - 1)` as sent,
        None when the server sent none; ValueError when it does not fit those tokens."""
        text = self.meta_info.routed_experts
        if text is None:
            return None
        rows = self.meta_info.prompt_tokens + len(self.output_ids) - 1 - start_len
        try:
            return RoutedExperts.from_base64(text, rows)
        except ValueError as exc:
            raise ValueError(f"meta_info.{exc}") from None

    def output_logprobs(self) -> list[float]:
        """Logprob of each output token (empty when logprobs were not requested)."""
        return [entry[0] for entry in self.meta_info.output_token_logprobs or []]

    def token_versions(self) -> list[str]:
        """The weight version of each output token.

        Uses the `weight_versions` spans when the server sent them (they must cover the output
        tokens exactly, in order), else `weight_version` for every token, else `"unknown"`.
        """
        n = len(self.output_ids)
        spans = self.meta_info.weight_versions
        if not spans:
            return [self.meta_info.weight_version or UNKNOWN_VERSION] * n
        raw = [span.model_dump() for span in spans]
        try:
            runs = spans_from_sglang(raw, n)
        except ValueError as exc:
            raise ValueError(f"meta_info.{exc}") from None
        return [UNKNOWN_VERSION if v is None else v for v in expand_version_spans(runs)]


class UpdateWeightsFromDiskRequest(RequestModel):
    """SGLang's `UpdateWeightFromDiskReqInput`."""

    model_path: str = Field(min_length=1)
    """Checkpoint directory with the new weights (same architecture)."""
    load_format: str | None = None
    abort_all_requests: bool = False
    """Abort in-flight requests (partial output, finish type abort) before swapping."""
    weight_version: str | None = None
    """The new version label; every token generated after the swap carries it."""
    is_async: bool = False
    torch_empty_cache: bool = False
    keep_pause: bool = False
    """Stay paused after the update (when the engine was paused)."""
    recapture_cuda_graph: bool = False
    token_step: int = 0
    flush_cache: bool = True


class UpdateWeightsResult(ResponseModel):
    success: bool
    message: str = ""
    num_paused_requests: int | None = 0


DEFAULT_WEIGHTS_GROUP = "weight_update_group"
"""SGLang's default `group_name` of a weight-update group."""


class InitWeightsUpdateGroupRequest(RequestModel):
    """SGLang's `InitWeightsUpdateGroupReqInput`: join a weight-update process group.

    The trainer is rank 0 and serves the group's `TCPStore` at `master_address:master_port`;
    the engine's ranks are `rank_offset` to `rank_offset + tp_size - 1` of `world_size`.
    """

    master_address: str = Field(min_length=1)
    master_port: int = Field(ge=1, le=65535)
    rank_offset: int = Field(ge=1)
    world_size: int = Field(ge=2)
    group_name: str = Field(default=DEFAULT_WEIGHTS_GROUP, min_length=1)
    backend: str = "nccl"

    @model_validator(mode="after")
    def _rank_in_world(self) -> InitWeightsUpdateGroupRequest:
        if self.rank_offset >= self.world_size:
            raise ValueError(
                f"rank_offset: {self.rank_offset} is outside the world of {self.world_size} ranks"
            )
        return self


class UpdateWeightsFromDistributedRequest(RequestModel):
    """SGLang's `UpdateWeightsFromDistributedReqInput`: one bucket of broadcast tensors.

    The engine receives `len(names)` broadcasts from rank 0 of group `group_name`, in order,
    tensor `i` of dtype `dtypes[i]` (a torch dtype name, e.g. `bfloat16`) and shape `shapes[i]`,
    and loads them under their Hugging Face parameter names.
    """

    names: list[str] = Field(min_length=1)
    dtypes: list[str]
    shapes: list[list[int]]
    group_name: str = Field(default=DEFAULT_WEIGHTS_GROUP, min_length=1)
    flush_cache: bool = True
    abort_all_requests: bool = False
    weight_version: str | None = None
    """The new version label, set once this bucket is loaded (send it with the last one)."""
    load_format: Literal["flattened_bucket"] | None = None
    """`flattened_bucket` (0.5.23): the bucket arrives as one uint8 broadcast, the tensors'
    bytes back to back in `names` order (`dressage.engine.flat_bucket`); None: one broadcast
    per tensor."""

    @model_validator(mode="after")
    def _same_lengths(self) -> UpdateWeightsFromDistributedRequest:
        n = len(self.names)
        for field, values in (("dtypes", self.dtypes), ("shapes", self.shapes)):
            if len(values) != n:
                raise ValueError(f"{field}: {len(values)} entries for {n} names")
        return self


class DestroyWeightsUpdateGroupRequest(RequestModel):
    """SGLang's `DestroyWeightsUpdateGroupReqInput` (0.5.3 and later)."""

    group_name: str = Field(default=DEFAULT_WEIGHTS_GROUP, min_length=1)


class BeginWeightUpdateRequest(RequestModel):
    """0.5.23's `BeginWeightUpdateReqInput`: open a weight-update session."""

    selector: Literal["target", "draft", "all"] = "all"


class EndWeightUpdateRequest(RequestModel):
    """0.5.23's `EndWeightUpdateReqInput`: close the session (no fields)."""


class WeightsGroupResult(ResponseModel):
    """The answer of the three weight-update-group endpoints."""

    success: bool
    message: str = ""


class PauseGenerationRequest(RequestModel):
    """SGLang's `PauseGenerationReqInput`.

    `abort`: abort every in-flight request (partial output, finish type abort) and hold new ones.
    `in_place`: hold running requests where they are (no new tokens) until continue.
    `retract`: like in_place, but the running requests give up their KV cache and recompute it
    on continue.
    """

    mode: Literal["abort", "retract", "in_place"] = "abort"


class AbortRequest(RequestModel):
    """SGLang's `AbortReq` as sent to `/abort_request`."""

    rid: str | None = None
    abort_all: bool = False


class ModelInfo(ResponseModel):
    """`/get_model_info`."""

    model_path: str
    tokenizer_path: str | None = None
    is_generation: bool = True
    preferred_sampling_params: str | None = None
    weight_version: str | None = None
    model_type: str | None = None
    architectures: list[str] | None = None


def error_message(body: bytes | str) -> str:
    """The error text of an SGLang error body, in any of its shapes: `{"error": "..."}`
    (0.5.23's `/generate` schema gate), `{"error": {"message": ...}}`
    (`_create_error_response`), the flat OpenAI `{"object": "error", "message": ...}`, FastAPI's
    `{"detail": ...}`, or plain text (`Internal Server Error`)."""
    try:
        data = json.loads(body)
    except (ValueError, TypeError):
        text = body.decode(errors="replace") if isinstance(body, bytes) else str(body)
        return text.strip() or "(empty body)"
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, str):
            return error
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(data.get("message"), str):
            return str(data["message"])
        if isinstance(data.get("detail"), str):
            return str(data["detail"])
    if isinstance(data, str):
        return data
    return json.dumps(data)
