"""Each local recipe (`examples/local-math.yaml`, `local-tools.yaml`, `local-environment.yaml`)
runs as shipped for two training steps through `dressage run` (real engine, proxy and agent
processes): its dataset file, agent program or environment module is found and its rollouts
are trained on. Only the warm start is left out (it is tested on its own), and the batch is
made small, to keep the run short."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from tests.engine_forks import run_command

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


@pytest.mark.parametrize(
    "recipe", ["local-math.yaml", "local-tools.yaml", "local-environment.yaml"]
)
def test_a_local_recipe_trains_two_steps(recipe: str, tmp_path: Path) -> None:
    if recipe == "local-math.yaml":
        pytest.importorskip("math_verify")
    if recipe == "local-tools.yaml":
        pytest.importorskip("openai")
    manifest = yaml.safe_load((EXAMPLES / recipe).read_text())
    spec = manifest["spec"]
    spec["model"].pop("warmStart", None)
    spec["rollout"].update(groupSize=2, batchSize=2)
    spec["local"] = {"metricsPort": 0, "cacheDir": str(tmp_path / "cache")}
    dataset = spec["task"].get("dataset")
    if dataset is not None:
        dataset["path"] = str(EXAMPLES / dataset["path"])
    job = tmp_path / recipe
    job.write_text(yaml.safe_dump(manifest))
    # From the repository root, as the recipes say; the environment module sits in examples/.
    done = run_command(
        [
            *(sys.executable, "-m", "dressage", "run", str(job), "--steps", "2"),
            *("--workdir", str(tmp_path / "runs")),
        ],
        cwd=ROOT,
        env=dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([str(ROOT), str(EXAMPLES)]),
            PYTHONUNBUFFERED="1",
            OMP_NUM_THREADS="1",
        ),
        timeout=400,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    history_file = tmp_path / "runs" / manifest["metadata"]["name"] / "history.jsonl"
    history = [json.loads(line) for line in history_file.read_text().splitlines()]
    assert [h["step"] for h in history] == [1, 2]
