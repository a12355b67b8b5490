"""The `AsyncRLJob` job model shared by the local runner, the runtime and the operator."""

from dressage.api.job import (
    API_GROUP,
    API_VERSION,
    KIND,
    PLURAL,
    AsyncRLJob,
    AsyncRLJobSpec,
    RolloutMode,
    StalenessSpec,
)
from dressage.api.loader import JobValidationError, load_job, validate_job

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "KIND",
    "PLURAL",
    "AsyncRLJob",
    "AsyncRLJobSpec",
    "JobValidationError",
    "RolloutMode",
    "StalenessSpec",
    "load_job",
    "validate_job",
]
