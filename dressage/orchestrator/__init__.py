"""Orchestration: the training loop and its wiring, shared by `dressage run` and `dressage train`.

Modules: `pipeline` (wires one job's run: proxy client, prompts, collector, resume, weight
publisher, engine sync, the training loop, and closes every client it opened), `loop` (collect
-> train -> publish -> record, one `StepRecord` per step), `collectors` (the agent and the
collector a job's spec asks for), `metrics` (the job's `/metrics`), `train_cli` (`dressage
train`, the trainer gang's entry point). The weight publishers `pipeline` wires live in
`dressage.weights`. The entry points above it start processes; the layers below it (trainer,
rollout, agents, proxy and engine clients) never reference the loop that wires them.
"""
