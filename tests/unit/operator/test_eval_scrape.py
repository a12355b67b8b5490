"""Reading the held-out evaluations from a job's Prometheus text into `status.evaluation`, the
best version kept across scrapes, and the per-job series the operator exports from it."""

from __future__ import annotations

from dressage_operator.eval_scrape import better, merge_evaluation, parse_evaluation
from dressage_operator.handlers import _status_of
from dressage_operator.metrics import OperatorMetrics
from dressage_operator.staleness_scrape import ScrapeResult, parse_staleness
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import generate_latest

from dressage import metrics as names
from dressage.api.status import AsyncRLJobStatus, EvaluatedVersion, EvaluationStatus, JobPhase

from .support import decide_for, make_job, running_pods


def latest_and_best(found: EvaluationStatus | None) -> tuple[EvaluatedVersion, EvaluatedVersion]:
    assert found is not None
    assert found.latest is not None
    assert found.best is not None
    return found.latest, found.best


def exposition(versions: dict[str, tuple[int, float, float]], runs: int = 0) -> str:
    """What trainer rank 0 exports for these `version: (step, pass@1, reward)` (the metric
    contract: `dressage.metrics.EVAL_*`), pass@8 beside pass@1 as a job sampling 8 would."""
    lines = [
        f"# TYPE {names.EVAL_PASS_AT_K} gauge",
        *(
            f'{names.EVAL_PASS_AT_K}{{k="{k}",version="{v}"}} {p if k == "1" else 1.0}'
            for v, (_, p, _) in versions.items()
            for k in ("1", "8")
        ),
        f"# TYPE {names.EVAL_REWARD_MEAN} gauge",
        *(f'{names.EVAL_REWARD_MEAN}{{version="{v}"}} {r}' for v, (_, _, r) in versions.items()),
        f"# TYPE {names.EVAL_STEP} gauge",
        *(f'{names.EVAL_STEP}{{version="{v}"}} {s}' for v, (s, _, _) in versions.items()),
        f"# TYPE {names.EVAL_PROMPTS} gauge",
        *(f'{names.EVAL_PROMPTS}{{version="{v}"}} 256' for v in versions),
        "# TYPE dressage_eval_runs counter",
        f"{names.EVAL_RUNS} {runs}",
        "",
    ]
    return "\n".join(lines)


def test_latest_is_the_highest_step_and_best_the_highest_pass_at_1() -> None:
    text = exposition(
        {
            "v0": (0, 0.1, 0.2),
            "v40": (40, 0.7, 0.75),
            "v50": (50, 0.6, 0.65),
            "v30": (30, 0.5, 0.5),
        },
        runs=6,
    )
    found = parse_evaluation(text)
    assert found == EvaluationStatus(
        latest=EvaluatedVersion(version="v50", step=50, pass_at_1=0.6, reward=0.65),
        best=EvaluatedVersion(version="v40", step=40, pass_at_1=0.7, reward=0.75),
        runs=6,
    )


def test_a_tie_for_the_best_goes_to_the_later_step() -> None:
    found = parse_evaluation(exposition({"v10": (10, 0.5, 0.5), "v20": (20, 0.5, 0.4)}))
    assert latest_and_best(found)[1].version == "v20"


def test_no_evaluation_exported_is_none_and_leaves_the_status_as_it_was() -> None:
    assert parse_evaluation("# TYPE dressage_train_step gauge\ndressage_train_step 3\n") is None
    kept = EvaluationStatus(latest=EvaluatedVersion(version="v1", step=1, pass_at_1=0.2))
    assert merge_evaluation(kept, None) is kept
    assert merge_evaluation(None, None) is None


def test_nan_figures_are_not_measured_yet() -> None:
    text = exposition({"v0": (0, 0.3, 0.3)}) + (
        f'{names.EVAL_PASS_AT_K}{{k="1",version="v5"}} NaN\n'
        f'{names.EVAL_REWARD_MEAN}{{version="v5"}} NaN\n'
        f'{names.EVAL_STEP}{{version="v5"}} 5\n'
    )
    latest, best = latest_and_best(parse_evaluation(text))
    assert (latest.version, best.version) == ("v0", "v0")


def test_the_best_is_kept_when_the_job_stops_exporting_it() -> None:
    """The job exports the latest 4 versions and its best; the status remembers a best the
    job's exporter has since dropped (a restarted trainer that evaluates again from scratch),
    and is replaced only by a higher figure."""
    first = parse_evaluation(exposition({"v40": (40, 0.7, 0.7), "v50": (50, 0.6, 0.6)}, runs=2))
    dropped = parse_evaluation(exposition({"v60": (60, 0.55, 0.5)}, runs=3))
    merged = merge_evaluation(first, dropped)
    latest, best = latest_and_best(merged)
    assert (best.version, best.pass_at_1) == ("v40", 0.7)
    assert latest.version == "v60"
    assert merged is not None
    assert merged.runs == 3
    higher = parse_evaluation(exposition({"v70": (70, 0.8, 0.8)}, runs=4))
    best = latest_and_best(merge_evaluation(merged, higher))[1]
    assert (best.version, best.step) == ("v70", 70)


@given(
    st.lists(
        st.lists(
            st.tuples(st.integers(0, 200), st.floats(0, 1, allow_nan=False)),
            min_size=1,
            max_size=5,
        ),
        min_size=1,
        max_size=8,
    )
)
def test_the_kept_best_is_the_best_of_every_scrape_so_far(
    scrapes: list[list[tuple[int, float]]],
) -> None:
    """Whatever the job exports at each scrape, the status's best is the highest pass@1 seen
    in any of them (the latest step among equals), and its latest the scrape's own."""
    status: EvaluationStatus | None = None
    seen: list[tuple[float, int]] = []
    for scrape in scrapes:
        versions = {f"v{step}": (step, p, p) for step, p in scrape}
        status = merge_evaluation(status, parse_evaluation(exposition(versions)))
        seen += [(p, step) for step, p, _ in versions.values()]
        latest, best = latest_and_best(status)
        assert latest.step == max(versions.values())[0]
        assert (best.pass_at_1, best.step) == max(seen)


def test_better_needs_a_figure() -> None:
    kept = EvaluatedVersion(version="v1", step=1, pass_at_1=0.4)
    assert not better(None, kept)
    assert not better(EvaluatedVersion(version="v9", step=9), kept)
    assert better(kept, None)
    assert better(kept, EvaluatedVersion(version="v0", step=0))


def test_decide_writes_the_evaluation_once_and_the_operator_exports_it() -> None:
    """One status per cycle: the scrape's evaluation lands in `status.evaluation`; a second
    scrape with the same figures changes nothing (no status write), and the status read back
    from the API server (numbers as JSON gives them) keeps it."""
    text = exposition({"v40": (40, 0.75, 0.8), "v50": (50, 0.5, 0.55)}, runs=2)
    scrape = ScrapeResult(
        url="http://x/metrics",
        staleness=parse_staleness(text, "t"),
        evaluation=parse_evaluation(text),
    )
    running = AsyncRLJobStatus(phase=JobPhase.RUNNING)
    plan = decide_for(make_job(), status=running, pods=running_pods(), scrape=scrape)
    latest, best = latest_and_best(plan.status.evaluation)
    assert (latest.version, best.version) == ("v50", "v40")
    wire = plan.status.to_wire()
    expected = {"version": "v40", "step": 40, "passAt1": 0.75, "reward": 0.8}
    assert wire["evaluation"]["best"] == expected
    read_back = _status_of({"status": wire})
    assert read_back.evaluation == plan.status.evaluation
    # Kubernetes writes a whole number without its `.0`: still a pass@1.
    whole = {"latest": {"version": "v1", "passAt1": 1}, "best": {"version": "v1", "passAt1": 1}}
    latest, best = latest_and_best(_status_of({"status": {"evaluation": whole}}).evaluation)
    assert (latest.pass_at_1, best.pass_at_1) == (1.0, 1.0)
    again = decide_for(make_job(), status=read_back, pods=running_pods(), scrape=scrape)
    assert again.status.to_wire() == wire
    # The job drops v40 from its export: the best stays.
    dropped = parse_evaluation(exposition({"v60": (60, 0.6, 0.6)}, runs=3))
    later = decide_for(
        make_job(),
        status=read_back,
        pods=running_pods(),
        scrape=ScrapeResult(url="http://x/metrics", staleness=scrape.staleness, evaluation=dropped),
    )
    assert latest_and_best(later.status.evaluation)[1].version == "v40"
    metrics = OperatorMetrics()
    metrics.jobs.update("ns", "job-a", later.status)
    exported = generate_latest(metrics.registry).decode()
    labels = '{dressage_job="job-a",namespace="ns"}'
    assert f"{names.JOB_EVAL_LATEST_PASS_AT_1}{labels} 0.6" in exported
    assert f"{names.JOB_EVAL_BEST_PASS_AT_1}{labels} 0.75" in exported
    assert f"{names.JOB_EVAL_LATEST_STEP}{labels} 60.0" in exported
    assert f"{names.JOB_EVAL_BEST_STEP}{labels} 40.0" in exported


def test_a_job_without_evaluation_exports_no_evaluation_series() -> None:
    metrics = OperatorMetrics()
    metrics.jobs.update("ns", "job-a", AsyncRLJobStatus(phase=JobPhase.RUNNING))
    exported = generate_latest(metrics.registry).decode()
    assert f"# TYPE {names.JOB_EVAL_BEST_PASS_AT_1} gauge" in exported
    assert f"{names.JOB_EVAL_BEST_PASS_AT_1}{{" not in exported
