"""Static maxima of what a manifest may ask, in the model and the CRD alike."""

from __future__ import annotations

MAX_INFERENCE_REPLICAS = 4096
MAX_TENSOR_PARALLEL_SIZE = 64
MAX_TRAINER_NODES = 1024
MAX_GPUS_PER_NODE = 64
MAX_ROLLOUT_SIZE = 65536
"""Static maxima of what a manifest may ask, in the model and the CRD alike. They only bound
the absurd; each cluster's own, lower limits are the operator's (`dressage_operator.limits`,
raised in the operator chart's `limits:`)."""

DEFAULT_MAX_SESSIONS = 65_536
"""Live sessions a proxy replica keeps by default (`proxy.maxSessions`): at about 2 KB for an
idle one, about 128 MB, and 256 times the default admitted generations, so the cap binds only
on abandoned sessions."""
