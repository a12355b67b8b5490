"""Rollout scheduling and batch-level staleness control.

Modules: `staleness` (the batch rule: `StalenessTracker`, `StalenessGroupFilter`),
`collector` (the asynchronous collector, the `Collector` protocol and the data position),
`fully_async_rollout` and `partial_async_rollout` (the design's names for it in each mode,
`docs/staleness.md`), `sync_rollout` (the synchronous collector), `retry` (the one retry
policy and its breaker), `stats` (the counts), `artifacts.samples` (the design's path to the
training sample, which lives in `dressage.data`). Agents produce the groups that rollout
schedules; rollout never imports the trainer.
"""
