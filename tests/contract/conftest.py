"""The contract tier imports SGLang's pure-Python modules once, up front: their import
emits deprecation warnings from torch and other dependencies that are SGLang's, not ours,
and the suite turns every warning into an error."""

from __future__ import annotations

import importlib
import importlib.util
import warnings

SGLANG_MODULES = (
    "sglang.srt.sampling.sampling_params",
    "sglang.srt.managers.io_struct",
    "sglang.srt.server_args",
)

if importlib.util.find_spec("sglang") is not None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in SGLANG_MODULES:
            importlib.import_module(name)
