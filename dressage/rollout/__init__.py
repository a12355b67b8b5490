"""Rollout scheduling and batch-level staleness control.

Modules: `staleness` (the batch rule: `StalenessTracker`, `StalenessGroupFilter`),
`collector` (the asynchronous collector and the `Collector` protocol), `fully_async_rollout`
and `partial_async_rollout` (the reference's names for it in each mode), `sync_rollout` (the
synchronous collector), `retry` (the one retry policy and its breaker), `stats` (the counts),
`artifacts.samples` (the reference's path to the training sample, which lives in
`dressage.data`). Agents produce the groups that rollout schedules; rollout never imports the
trainer.
"""
