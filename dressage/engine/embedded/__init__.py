"""The embedded engine: a CPU stand-in that serves the subset of SGLang's HTTP API Dressage uses.

It plays one SGLang release at a time (`release_profiles`): what that release accepts, refuses
and answers. The engine contract (`dressage.engine`) never imports this package; local runs,
kind clusters without GPUs and the tests start it as `python -m dressage engine serve`.
"""
