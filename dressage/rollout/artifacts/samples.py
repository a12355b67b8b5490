"""The training sample and its version metadata (`full_versions`, `version_spans`,
`dressage_start_token_version`, `dressage_end_token_version`), where the design
(`docs/staleness.md`) names them. They live in the data layer, `dressage.data.samples`, which
every layer shares.
"""

from dressage.data.samples import (
    VERSION_SPAN_MAX,
    VERSION_SPAN_MEAN,
    VERSION_SPAN_MIN,
    Sample,
    mask_nonlast_version_tokens,
    version_span_stats,
)
from dressage.data.spans import VersionSpan, compress_versions, expand_version_spans

__all__ = [
    "VERSION_SPAN_MAX",
    "VERSION_SPAN_MEAN",
    "VERSION_SPAN_MIN",
    "Sample",
    "VersionSpan",
    "compress_versions",
    "expand_version_spans",
    "mask_nonlast_version_tokens",
    "version_span_stats",
]
