"""The proxy's series labelled by `engine` are bounded: exported while the pool holds at most
`per_engine_max` engines, dropped beyond it (the pool counted by health instead, busy refusals
for all engines together), so a 1,024-engine job does not export a thousand series per proxy."""

from __future__ import annotations

from dressage import metrics as names
from dressage.proxy.metrics import ALL_ENGINES, ProxyMetrics


def _series(metrics: ProxyMetrics, name: str) -> list[str]:
    return [
        line
        for line in metrics.render().decode().splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    ]


def test_per_engine_series_are_kept_to_small_pools_and_the_pool_is_always_counted() -> None:
    size = [2]
    metrics = ProxyMetrics(lambda: 0.0, lambda: (size[0] - 1, 1), lambda: size[0], 4)
    metrics.engine_health("http://e0", True)
    metrics.engine_health("http://e1", False)
    metrics.engine_refused_busy("http://e0")
    assert len(_series(metrics, names.PROXY_ENGINE_HEALTHY)) == 2
    assert 'engine="http://e0"' in _series(metrics, names.PROXY_ENGINE_BUSY)[0]

    size[0] = 1024
    metrics.engine_health("http://e2", True)
    metrics.engine_refused_busy("http://e2")
    assert _series(metrics, names.PROXY_ENGINE_HEALTHY) == []
    busy = _series(metrics, names.PROXY_ENGINE_BUSY)
    assert any(f'engine="{ALL_ENGINES}"' in line for line in busy)
    assert not any("http://e2" in line for line in busy)
    counts = _series(metrics, names.PROXY_ENGINES)
    assert 'dressage_proxy_engines{state="healthy"} 1023.0' in counts
    assert 'dressage_proxy_engines{state="unhealthy"} 1.0' in counts
