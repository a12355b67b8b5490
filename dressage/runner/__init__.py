"""The local runner: `dressage run JOB.yaml` executes an AsyncRLJob on one machine.

Modules: `collector` (the `Collector` protocol and `TrainBatch`, the seam between rollout and
training), `collectors` (the collector for `spec.rollout.mode`), `loop` (collect -> train ->
publish -> record, shared with `dressage train`), `local` (child processes, wiring, shutdown),
`processes` (child process management), `metrics` (Prometheus), `report` (history, JSON and
PNG report), `cli` (flags).
"""
