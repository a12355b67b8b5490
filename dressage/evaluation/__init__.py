"""Held-out evaluation during training, exact to one weight version (`spec.evaluation`).

Modules: `figures` (pure: pass@k by the unbiased estimator, the single-version check, the
summary of one evaluation, the best version), `evaluator` (one version's evaluation through the
job's agent and the proxy, every counted token that version's), `schedule` (which versions are
evaluated during training, and the hold that keeps the engines on a version until its
evaluation is done). The orchestrator wires them (`dressage.orchestrator.evaluations`).
"""
