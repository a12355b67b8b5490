"""The local runner: `dressage run JOB.yaml` executes an AsyncRLJob on one machine.

Modules: `cli` (flags), `local` (engine and proxy child processes, then the job's pipeline
from `dressage.orchestrator`, and shutdown), `fleet` (the engines, changed while the run
trains: add, kill, drain), `churn` (the `--churn` schedule), `processes` (child process
management), `report` (history, JSON and PNG report).
"""
