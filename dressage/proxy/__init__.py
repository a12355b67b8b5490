"""The rollout proxy: every generation of every agent goes through it.

It keeps one session per trajectory, records the weight version of every generated token,
resumes generations interrupted by weight updates (partial rollout) and refuses trajectories
whose version span exceeds the limit. The HTTP API is documented in `dressage.proxy.server`.

This package never imports torch: the proxy image does not ship it.
"""
