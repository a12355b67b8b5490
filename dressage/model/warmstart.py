"""Supervised warm start: teach a policy the task's answer format before RL.

A randomly initialised model (such as `builtin:tiny`) never samples a correct answer, so GRPO
would see only zero rewards and learn nothing. The warm start trains on demonstrations drawn
with a seed apart from the RL prompts: `prompt -> answer<eos>` pairs of a single-turn task, or
every turn of an environment's expert episode, in the context the rollout builds. It stops as
soon as the *expected reward at temperature 1* reaches `target_reward`: the probability of
sampling the demonstrated answer turn, averaged over the task's first `eval_prompts` RL prompts
(and over the turns of each episode). The policy then starts RL with a low but nonzero success
rate, and RL's effect stays visible.

The result is a Hugging Face checkpoint directory (tokenizer files included), cached under
`cache_dir/warmstart/<hash>` where the hash covers the base weights, the task spec, the contents
of the task's local inputs (the dataset file or directory, an environment's module source) and
the settings: editing the data file or the environment builds a new warm start. One process
builds an entry at a time (`building`, a lock file beside it): a second run asking for the same
warm start meanwhile waits and reads the first one's result instead of training it again, as
two runs started together on a machine without the cache (or the test suite's processes) would.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from dressage.api.job import AsyncRLJobSpec, TaskSpec, WarmStartSpec
from dressage.tasks import Environment, Task, get_task
from dressage.tasks.codec import PromptCodec, demonstration

WARM_START_SEED_OFFSET = 1_000_003
"""Added to the task seed for the warm start's training prompts."""
_COPIED_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
)


@dataclass(frozen=True)
class WarmStartResult:
    """Where the warm-started checkpoint is and what it reached."""

    model_dir: Path
    expected_reward: float
    steps: int
    cached: bool


def _hash_file(digest: hashlib._Hash, path: Path, name: str) -> None:
    digest.update(f"{name}\0{path.stat().st_size}\0".encode())
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)


def _hash_tree(digest: hashlib._Hash, path: Path) -> None:
    if path.is_dir():
        for item in sorted(p for p in path.rglob("*") if p.is_file()):
            _hash_file(digest, item, item.relative_to(path).as_posix())
    elif path.is_file():
        _hash_file(digest, path, path.name)


def _task_inputs(task: TaskSpec) -> list[Path]:
    """The local files a task is built from, beyond its spec: the dataset's path (or its local
    `dataFiles`) and the source file of a user environment's module."""
    from dressage.tasks.usercode import UserCodeError, resolve_path

    inputs: list[Path] = []
    dataset = task.dataset
    if dataset is not None and dataset.path is not None:
        inputs.append(resolve_path(dataset.path, "spec.task.dataset.path"))
    for name in (dataset.data_files or []) if dataset is not None else []:
        try:
            inputs.append(resolve_path(name, "spec.task.dataset.dataFiles"))
        except UserCodeError:
            continue  # a remote file, or a pattern the `datasets` builder expands
    if task.environment is not None:
        import importlib.util

        module = task.environment.partition(":")[0]
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            found = None
        if found is not None and found.origin and Path(found.origin).is_file():
            inputs.append(Path(found.origin))
    return inputs


def cache_key(base_dir: Path, task: TaskSpec, settings: WarmStartSpec) -> str:
    """Hash of the base weights, the task (its spec and the contents of its local inputs:
    dataset files, an environment's module) and the warm-start settings."""
    digest = hashlib.sha256()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        path = base_dir / name
        if path.is_file():
            digest.update(name.encode())
            digest.update(path.read_bytes())
    digest.update(task.model_dump_json().encode())
    for path in _task_inputs(task):
        _hash_tree(digest, path)
    digest.update(settings.model_dump_json().encode())
    return digest.hexdigest()[:16]


def _pad(rows: Sequence[Sequence[int]], value: int) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([[*r] + [value] * (width - len(r)) for r in rows], dtype=torch.long)


def answer_logprobs(
    model: torch.nn.Module,
    prompts: Sequence[list[int]],
    answers: Sequence[list[int]],
    pad_id: int,
) -> torch.Tensor:
    """Sum of log-probabilities of each answer turn given its prompt: [N]."""
    rows = [p + a for p, a in zip(prompts, answers, strict=True)]
    ids = _pad(rows, pad_id)
    attention = _pad([[1] * len(r) for r in rows], 0)
    mask = _pad([[0] * len(p) + [1] * len(a) for p, a in zip(prompts, answers, strict=True)], 0)
    logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
    lp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return (lp * mask[:, 1:]).sum(-1)


def expected_reward(
    model: torch.nn.Module, codec: PromptCodec, task: Task | Environment, count: int, pad_id: int
) -> float:
    """Mean probability of sampling the demonstrated answer turn over prompts `0..count-1`.

    For a single-turn task this is the expected reward at temperature 1 exactly. For an
    environment it is the mean over the expert's turns (context as the rollout builds it), a
    stand-in for the success rate: the expert is one good policy among several.
    """
    model.eval()
    per_prompt: list[float] = []
    with torch.no_grad():
        for start in range(0, count, 128):
            demos = [demonstration(task, codec, i) for i in range(start, min(count, start + 128))]
            turns = [turn for demo in demos for turn in demo]
            probs = answer_logprobs(
                model, [c for c, _ in turns], [a for _, a in turns], pad_id
            ).exp()
            offset = 0
            for demo in demos:
                per_prompt.append(float(probs[offset : offset + len(demo)].mean()))
                offset += len(demo)
    model.train()
    return sum(per_prompt) / count


def warm_start(
    base_dir: Path,
    task_spec: TaskSpec,
    settings: WarmStartSpec,
    cache_dir: Path,
    *,
    log: Callable[[str], None] = print,
    task: Task | Environment | None = None,
) -> WarmStartResult:
    """The warm-started checkpoint for `base_dir` on `task_spec`, built once and cached.
    `task`: the job's task when the caller built it already (a dataset is then not read
    again), else it is built here."""
    base_dir = Path(base_dir)
    target = Path(cache_dir) / "warmstart" / cache_key(base_dir, task_spec, settings)
    cached = _cached(target)
    if cached is not None:
        return cached
    with building(target, log):
        cached = _cached(target)  # built by the process this one waited for
        if cached is not None:
            return cached
        return _train(target, base_dir, task_spec, settings, log, task)


def _cached(target: Path) -> WarmStartResult | None:
    meta_path = target / "warmstart.json"
    if not meta_path.is_file():
        return None
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    return WarmStartResult(target, float(meta["expected_reward"]), int(meta["steps"]), True)


@contextmanager
def building(target: Path, log: Callable[[str], None] = print) -> Iterator[None]:
    """Held while this process builds the cache entry `target`: an exclusive `flock` on
    `.<name>.lock` beside it, released when the block ends (or the process dies). A process
    that finds it held says so and waits."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / f".{target.name}.lock").open("a+b") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"warm start: another process is building {target}; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _train(
    target: Path,
    base_dir: Path,
    task_spec: TaskSpec,
    settings: WarmStartSpec,
    log: Callable[[str], None],
    task: Task | Environment | None,
) -> WarmStartResult:
    """Train the warm start and write it to `target` (whole or not at all)."""
    from transformers import AutoModelForCausalLM

    meta_path = target / "warmstart.json"
    torch.manual_seed(settings.seed)
    codec = PromptCodec.from_pretrained(base_dir)
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    pad = model.config.pad_token_id
    pad_id = int(pad) if isinstance(pad, int) else codec.eos_id
    eval_task = get_task(task_spec) if task is None else task
    train_spec = task_spec.model_copy(update={"seed": task_spec.seed + WARM_START_SEED_OFFSET})
    reseed = getattr(eval_task, "with_seed", None)  # a dataset task: its rows, reordered
    train_task = get_task(train_spec) if reseed is None else reseed(train_spec.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate)
    model.train()

    started = time.monotonic()
    reward = expected_reward(model, codec, eval_task, settings.eval_prompts, pad_id)
    step = 0
    eval_every = 5
    while reward < settings.target_reward and step < settings.max_steps:
        turns = [
            turn
            for i in range(settings.batch_size)
            for turn in demonstration(train_task, codec, step * settings.batch_size + i)
        ]
        prompts = [context for context, _ in turns]
        answers = [answer for _, answer in turns]
        n_tokens = sum(len(a) for a in answers)
        loss = -answer_logprobs(model, prompts, answers, pad_id).sum() / n_tokens
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        step += 1
        if step % eval_every == 0 or step == settings.max_steps:
            reward = expected_reward(model, codec, eval_task, settings.eval_prompts, pad_id)
            if step % (5 * eval_every) == 0 or step == settings.max_steps:
                log(f"warm start: step {step} loss {loss.item():.3f} expected reward {reward:.3f}")

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".warmstart-", dir=target.parent))
    try:
        model.save_pretrained(str(tmp), safe_serialization=True)
        for name in _COPIED_FILES:
            if (base_dir / name).is_file():
                shutil.copy2(base_dir / name, tmp / name)
        meta = {
            "base": str(base_dir),
            "expected_reward": reward,
            "steps": step,
            "seconds": round(time.monotonic() - started, 1),
            "settings": settings.model_dump(mode="json"),
            "task": task_spec.model_dump(mode="json"),
        }
        (tmp / "warmstart.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")
        try:
            os.replace(tmp, target)
        except OSError:
            if not meta_path.is_file():  # another process finished first: use its result
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return WarmStartResult(target, reward, step, False)


def initial_model_dir(
    spec: AsyncRLJobSpec,
    cache_dir: Path,
    *,
    log: Callable[[str], None] = print,
    task: Task | Environment | None = None,
) -> Path:
    """The checkpoint RL starts from: `spec.model.source`, warm-started when the job asks
    (on `task` when given, see `warm_start`)."""
    from dressage.model import resolve_model_source

    base = resolve_model_source(spec.model.source, cache_dir)
    if spec.model.warm_start is None:
        return base
    result = warm_start(base, spec.task, spec.model.warm_start, cache_dir, log=log, task=task)
    how = "cached" if result.cached else "trained"
    log(
        f"warm start ({how}): {result.steps} supervised steps, expected reward "
        f"{result.expected_reward:.3f} -> {result.model_dir}"
    )
    return result.model_dir
