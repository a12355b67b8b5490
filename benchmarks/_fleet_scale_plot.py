"""The fleet-scale benchmark's figures against the engine count, one panel each
(`benchmarks/results/fleet_scale.json` -> `fleet_scale.png`).

    python benchmarks/_fleet_scale_plot.py [results.json] [out.png]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

RESULTS = Path(__file__).resolve().parent / "results" / "fleet_scale.json"


def plot(result: dict[str, Any], path: Path) -> None:
    rows = [r for r in result["results"] if "error" not in r]
    engines = [r["engines"] for r in rows]
    fig, axes = plt.subplots(2, 3, figsize=(13, 7))
    (pub, rps, lat), (bal, op, series) = axes

    pub.plot(engines, [r["publish_overhead_ms"]["disk"] for r in rows], "o-", label="disk")
    if all("disk_direct" in r["publish_overhead_ms"] for r in rows):
        pub.plot(
            engines,
            [r["publish_overhead_ms"]["disk_direct"] for r in rows],
            "^-",
            label="disk, engine by engine from the publisher",
        )
    pub.plot(
        engines,
        [r["publish_overhead_ms"]["distributed_control"] for r in rows],
        "s-",
        label="distributed (control messages)",
    )
    pub.set_title("publish fan-out overhead (ms)")

    for replicas in rows[0]["proxy"]:
        rps.plot(
            engines,
            [r["proxy"][replicas]["requests_per_s"] for r in rows],
            "o-",
            label=f"{replicas} replica(s)",
        )
    rps.set_title("proxy requests/s")

    lat.plot(engines, [r["added_latency"]["p50_ms"] for r in rows], "o-", label="p50")
    lat.plot(engines, [r["added_latency"]["p99_ms"] for r in rows], "s-", label="p99")
    lat.set_title("latency the proxy adds (ms)")

    for replicas in rows[0]["proxy"]:
        bal.plot(
            engines,
            [r["proxy"][replicas]["routing_balance"] for r in rows],
            "o-",
            label=f"{replicas} replica(s)",
        )
    bal.set_title("routing balance (busiest / mean)")

    op.plot(engines, [r["operator"]["seconds_to_all_children"] for r in rows], "o-")
    op.set_title("operator: seconds to all children")

    series.plot(engines, [r["series_per_job"] for r in rows], "o-", label="all")
    series.plot(engines, [r["sglang_series"] for r in rows], "s--", label="engines' SGLang")
    series.set_title("Prometheus series per job")

    for ax in axes.flat:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("engines")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    before = result["load_average_before"][0]
    after = result["load_average_after"][0]
    fig.suptitle(
        f"fleet_scale.py, {result['date']}, {result['cpus']} cores, "
        f"load average {before:.1f} before, {after:.1f} after (provisional)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def main() -> int:
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else source.with_suffix(".png")
    plot(json.loads(source.read_text()), out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
