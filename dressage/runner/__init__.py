"""The local runner: `dressage run JOB.yaml` executes an AsyncRLJob on one machine."""
