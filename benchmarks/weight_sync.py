"""Weight publish latency: a checkpoint on disk against a broadcast over a process group, and
on the broadcast path one broadcast per tensor against one flattened broadcast per bucket.

For each model size (random-initialised Llama shapes of about 10M, 100M and 300M parameters,
from a `transformers.LlamaConfig`, weights in bfloat16 as a trainer would serve them), one
embedded engine process on loopback, playing SGLang 0.5.23 (the newest tested release, which has
weight-update sessions and flattened buckets), gets the same new weights published three ways
in each round, in turn:

- disk: pause (`in_place`) -> `POST /update_weights_from_disk` (then `/flush_cache`) ->
  continue, after writing the checkpoint (`model.safetensors`, then fsync: shared storage must
  hold it before engines read it); reported as the write, the fsync, the pause-to-continue
  time, and their sum.
- distributed, per tensor: pause -> `DistributedWeightSender.send(flattened=False)` (gloo,
  64 MiB buckets, inside `/begin_weight_update` ... `/end_weight_update`, one
  `/update_weights_from_distributed` per bucket beside one broadcast per tensor) -> continue.
- distributed, flattened: the same with `load_format: flattened_bucket`, one uint8 broadcast
  per bucket (`dressage.engine.flat_bucket`, SGLang's `FlattenedTensorBucket` layout).

The group is formed once per engine beforehand (reported separately: it is paid once per run,
not per publish). Each publish is checked: the engine reports the new version, and after each
distributed publish its greedy logprobs on a prompt equal those after the disk publish of the
same weights. The checkpoint is re-read from the page cache (the file was just written), the
most favourable case for disk; shared network storage is slower.

Against the number of engines (`--engines 1,2,4,8`, the `fleet` part): one model size
(`--fleet-size`, 10M by default), that many engine processes, and the two topologies of the
distributed path in turn, each publishing the same weights `--repeats` times:

- single group: today's one group of rank 0 and every engine (`DistributedWeightSender`),
  formed once; a membership change re-forms it on every engine (`group_reform_s`: destroy,
  then init with all N).
- per-engine groups: `FleetWeightSender`, one group per engine on one store, each bucket
  broadcast to every group concurrently; a membership change forms one group
  (`join_one_s`: the N-th engine joining while N-1 are members).

A publish here is the sender's send (sessions, buckets, flush) with no generation running, so
no pause; every engine is checked to report the new version after each. Figures are medians
over the rounds. Prints a table and writes `benchmarks/results/weight_sync.json`
(`weight_sync_quick.json` with `--quick`: the 10M model, 2 rounds, 1 and 2 engines, a smoke
test).

    python benchmarks/weight_sync.py [--parts disk,fleet] [--sizes 10M,100M,300M]
        [--engines 1,2,4,8] [--fleet-size 10M] [--repeats 3] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # runnable as `python benchmarks/weight_sync.py`
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from _runs import write_result  # noqa: E402
from dressage_testkit.engine import start_engine  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import LlamaConfig  # noqa: E402

from dressage.engine import EngineClient, GenerateRequest, SamplingParams  # noqa: E402
from dressage.engine.embedded.model import ModelShape, parameter_shapes  # noqa: E402
from dressage.model import BUILTIN_TINY, resolve_model_source  # noqa: E402
from dressage.weights.broadcast import DistributedWeightSender  # noqa: E402
from dressage.weights.fleet import FleetWeightSender  # noqa: E402

SIZES: dict[str, dict[str, Any]] = {
    "10M": {
        "vocab_size": 8192,
        "hidden_size": 256,
        "intermediate_size": 688,
        "num_hidden_layers": 8,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
    },
    "100M": {
        "vocab_size": 32000,
        "hidden_size": 768,
        "intermediate_size": 2048,
        "num_hidden_layers": 8,
        "num_attention_heads": 12,
        "num_key_value_heads": 12,
    },
    "300M": {
        "vocab_size": 32000,
        "hidden_size": 1024,
        "intermediate_size": 2816,
        "num_hidden_layers": 18,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
    },
}
BUCKET_BYTES = 64 * 1024 * 1024
RELEASE = "0.5.23"
"""The release the engine plays: the first tested one with flattened buckets."""
PROMPT = [5, 11, 17, 23, 2, 6]


def write_config(out: Path, size: str) -> ModelShape:
    """A checkpoint directory with `config.json` of `size` and the project's tokenizer."""
    out.mkdir(parents=True, exist_ok=True)
    config = LlamaConfig(
        **SIZES[size],
        max_position_embeddings=256,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        dtype="bfloat16",
    )
    config.architectures = ["LlamaForCausalLM"]
    config.to_json_file(str(out / "config.json"))
    tiny = resolve_model_source(BUILTIN_TINY, out.parent / "cache")
    shutil.copy(tiny / "tokenizer.json", out / "tokenizer.json")
    return ModelShape.from_checkpoint(out)


def random_weights(shape: ModelShape, seed: int) -> dict[str, torch.Tensor]:
    """Every parameter of `shape`, random (norms near 1), in bfloat16."""
    generator = torch.Generator().manual_seed(seed)
    out = {}
    for name, dims in parameter_shapes(shape).items():
        if len(dims) == 1:
            tensor = 1.0 + 0.01 * torch.randn(dims, generator=generator)
        else:
            tensor = 0.02 * torch.randn(dims, generator=generator)
        out[name] = tensor.to(torch.bfloat16)
    return out


def write_checkpoint(state: dict[str, torch.Tensor], path: Path) -> tuple[float, float]:
    """Write `state` to `path` and flush it to storage; seconds of each (the publish waits)."""
    start = time.perf_counter()
    save_file(state, str(path))
    wrote = time.perf_counter() - start
    start = time.perf_counter()
    with open(path, "rb+") as handle:
        os.fsync(handle.fileno())
    return wrote, time.perf_counter() - start


async def logprobs(client: EngineClient) -> list[float]:
    params = SamplingParams(max_new_tokens=2, temperature=0.0, ignore_eos=True)
    response = await client.generate(
        GenerateRequest(input_ids=PROMPT, sampling_params=params, return_logprob=True)
    )
    return response.output_logprobs()


async def measure(
    base_url: str, checkpoint: Path, weights: list[dict[str, torch.Tensor]], repeats: int
) -> dict[str, Any]:
    write_s: list[float] = []
    fsync_s: list[float] = []
    disk_s: list[float] = []
    per_tensor_s: list[float] = []
    flat_s: list[float] = []
    buckets = tensors = 0
    async with EngineClient(base_url) as client:
        sender = DistributedWeightSender(
            [client], master_address="127.0.0.1", backend="gloo", bucket_bytes=BUCKET_BYTES
        )
        start = time.perf_counter()
        await sender.init_group()
        init_s = time.perf_counter() - start
        for r in range(repeats):
            state = weights[r % len(weights)]
            wrote, synced = write_checkpoint(state, checkpoint / "model.safetensors")
            write_s.append(wrote)
            fsync_s.append(synced)
            start = time.perf_counter()
            await client.pause_generation("in_place")
            await client.update_weights_from_disk(str(checkpoint), f"disk-{r}", timeout_s=600)
            await client.continue_generation()
            disk_s.append(time.perf_counter() - start)
            assert await client.get_weight_version() == f"disk-{r}"
            after_disk = await logprobs(client)

            for flattened, times in ((False, per_tensor_s), (True, flat_s)):
                # Other weights in between, so the broadcast has to change something.
                other = weights[(r + 1) % len(weights)]
                await sender.send(iter(other.items()), f"other-{r}-{flattened}")
                assert await logprobs(client) != after_disk

                label = f"dist-{r}-{'flat' if flattened else 'tensor'}"
                start = time.perf_counter()
                await client.pause_generation("in_place")
                report = await sender.send(iter(state.items()), label, flattened=flattened)
                await client.continue_generation()
                times.append(time.perf_counter() - start)
                assert report.flattened is flattened
                buckets, tensors = report.buckets, report.tensors
                assert await client.get_weight_version() == label
                assert await logprobs(client) == after_disk, "distributed publish differs"
        await sender.destroy_group()
        await sender.aclose()
    write, sync, disk, per_tensor, flat = (
        statistics.median(v) for v in (write_s, fsync_s, disk_s, per_tensor_s, flat_s)
    )
    total = write + sync + disk
    return {
        "group_init_s": round(init_s, 3),
        "buckets": buckets,
        "tensors": tensors,
        "disk_write_s": round(write, 3),
        "disk_fsync_s": round(sync, 3),
        "disk_pause_to_continue_s": round(disk, 3),
        "disk_total_s": round(total, 3),
        "distributed_per_tensor_s": round(per_tensor, 3),
        "distributed_flattened_s": round(flat, 3),
        "flattened_speedup_vs_per_tensor": round(per_tensor / flat, 2),
        "speedup_vs_disk_total": round(total / flat, 2),
        "speedup_vs_disk_pause_to_continue": round(disk / flat, 2),
        "runs": {
            "disk_write_s": write_s,
            "disk_fsync_s": fsync_s,
            "disk_pause_to_continue_s": disk_s,
            "distributed_per_tensor_s": per_tensor_s,
            "distributed_flattened_s": flat_s,
        },
    }


async def versions_are(clients: list[EngineClient], label: str) -> None:
    served = await asyncio.gather(*(c.get_weight_version() for c in clients))
    assert served == [label] * len(clients), f"{label}: engines report {served}"


async def measure_fleet(
    urls: list[str], counts: list[int], state: dict[str, torch.Tensor], repeats: int
) -> list[dict[str, Any]]:
    """Publish `state` to the first N of `urls` for each N in `counts`, over one group and
    over per-engine groups; medians of `repeats` publishes each."""
    rows = []
    clients = [EngineClient(url) for url in urls]
    try:
        for n in counts:
            engines = clients[:n]
            single = DistributedWeightSender(
                engines, master_address="127.0.0.1", backend="gloo", bucket_bytes=BUCKET_BYTES
            )
            start = time.perf_counter()
            await single.init_group()
            single_init = time.perf_counter() - start
            single_s = []
            for r in range(repeats):
                label = f"single-{n}-{r}"
                report = await single.send(iter(state.items()), label)
                single_s.append(report.seconds)
                await versions_are(engines, label)
            start = time.perf_counter()
            await single.destroy_group()  # 0.5.23 has the route: every engine leaves
            await single.init_group()
            reform = time.perf_counter() - start
            await single.destroy_group()
            await single.aclose()

            fleet = FleetWeightSender(
                master_address="127.0.0.1", backend="gloo", bucket_bytes=BUCKET_BYTES
            )
            start = time.perf_counter()
            await fleet.update_members(engines[:-1])
            first = time.perf_counter() - start
            start = time.perf_counter()
            change = await fleet.update_members(engines)
            join_one = time.perf_counter() - start
            assert not change.failed, change.failed
            fleet_s = []
            for r in range(repeats):
                label = f"fleet-{n}-{r}"
                sent = await fleet.send(iter(state.items()), label)
                assert not sent.failed, sent.failed
                fleet_s.append(sent.report.seconds)
                await versions_are(engines, label)
            await fleet.update_members([])
            await fleet.aclose()
            single_med, fleet_med = statistics.median(single_s), statistics.median(fleet_s)
            rows.append(
                {
                    "engines": n,
                    "single_group_publish_s": round(single_med, 3),
                    "per_engine_groups_publish_s": round(fleet_med, 3),
                    "per_engine_over_single": round(fleet_med / single_med, 2),
                    "single_group_init_s": round(single_init, 3),
                    "single_group_reform_s": round(reform, 3),
                    "per_engine_groups_init_s": round(first + join_one, 3),
                    "join_one_s": round(join_one, 3),
                    "runs": {"single_group": single_s, "per_engine_groups": fleet_s},
                }
            )
            row = rows[-1]
            print(
                f"{n} engines: publish single group {single_med:.3f}s, per-engine groups "
                f"{fleet_med:.3f}s ({row['per_engine_over_single']:.2f}x); a membership "
                f"change: re-form the single group {reform:.3f}s, join one engine "
                f"{join_one:.3f}s",
                flush=True,
            )
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))
    return rows


def run_fleet(
    work: Path, size: str, counts: list[int], repeats: int, threads: int
) -> dict[str, Any]:
    checkpoint = work / f"fleet-{size}"
    shape = write_config(checkpoint, size)
    state = random_weights(shape, seed=1)
    save_file(random_weights(shape, seed=2), str(checkpoint / "model.safetensors"))
    with contextlib.ExitStack() as stack:
        urls = [
            stack.enter_context(
                start_engine(
                    model=str(checkpoint),
                    max_batch_size=1,
                    threads=threads,
                    sglang_release=RELEASE,
                    extra_args=["--context-length", "64"],
                    startup_timeout_s=600,
                )
            ).base_url
            for _ in range(max(counts))
        ]
        rows = asyncio.run(measure_fleet(urls, counts, state, repeats))
    return {
        "size": size,
        "parameters": sum(t.numel() for t in state.values()),
        "rows": rows,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(SIZES))
    parser.add_argument("--repeats", type=int, default=3, help="rounds (medians over them)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the engine")
    parser.add_argument("--parts", default="disk,fleet", help="disk, fleet or both")
    parser.add_argument("--engines", default="1,2,4,8", help="engine counts of the fleet part")
    parser.add_argument("--fleet-size", default="10M", choices=list(SIZES))
    parser.add_argument(
        "--quick", action="store_true", help="smoke test: the 10M model, 2 rounds, 1-2 engines"
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.repeats, args.engines, args.fleet_size = "10M", 2, "1,2", "10M"
    parts = set(args.parts.split(","))
    if not parts <= {"disk", "fleet"}:
        parser.error(f"--parts: {args.parts!r}: name disk, fleet or both")
    counts = [int(n) for n in args.engines.split(",")]
    if any(n < 1 for n in counts):
        parser.error(f"--engines: counts must be >= 1, got {args.engines}")
    if args.out is None:
        name = "weight_sync_quick.json" if args.quick else "weight_sync.json"
        args.out = ROOT / "benchmarks" / "results" / name
    torch.set_num_threads(args.threads)

    rows = []
    fleet: dict[str, Any] | None = None
    work = Path(tempfile.mkdtemp(prefix="dressage-wsync-"))
    try:
        for size in args.sizes.split(",") if "disk" in parts else []:
            checkpoint = work / size
            shape = write_config(checkpoint, size)
            weights = [random_weights(shape, seed) for seed in (1, 2)]
            params = sum(t.numel() for t in weights[0].values())
            save_file(weights[1], str(checkpoint / "model.safetensors"))
            with start_engine(
                model=str(checkpoint),
                max_batch_size=1,
                threads=args.threads,
                sglang_release=RELEASE,
                extra_args=["--context-length", "64"],
                startup_timeout_s=600,
            ) as engine:
                figures = asyncio.run(measure(engine.base_url, checkpoint, weights, args.repeats))
            rows.append({"size": size, "parameters": params, **figures})
            del weights
            print(
                f"{size:>5} {params / 1e6:7.1f}M params, {figures['tensors']} tensors in "
                f"{figures['buckets']} buckets: disk write {figures['disk_write_s']:.2f}s"
                f" + fsync {figures['disk_fsync_s']:.2f}s"
                f" + pause-to-continue {figures['disk_pause_to_continue_s']:.2f}s; distributed "
                f"per tensor {figures['distributed_per_tensor_s']:.2f}s, flattened "
                f"{figures['distributed_flattened_s']:.2f}s "
                f"({figures['flattened_speedup_vs_per_tensor']:.2f}x; "
                f"{figures['speedup_vs_disk_total']:.1f}x vs disk total)",
                flush=True,
            )
        if "fleet" in parts:
            fleet = run_fleet(work, args.fleet_size, counts, args.repeats, args.threads)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    result = {
        "benchmark": "weight_sync",
        "setup": {
            "engine": "embedded CPU engine, one process on loopback, float32 serving weights",
            "weights": "random Llama (transformers LlamaConfig), bfloat16 on the wire and on disk",
            "distributed": f"gloo broadcast, {BUCKET_BYTES >> 20} MiB buckets, per tensor "
            "and flattened (one uint8 broadcast per bucket)",
            "sglang_release": RELEASE,
            "disk": "safetensors written, fsynced, then re-read by the engine (page cache warm)",
            "repeats": args.repeats,
            "engine_threads": args.threads,
            "statistic": "median",
        },
        "rows": rows,
        "fleet": fleet,
    }
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
