"""Dressage's test support: real processes, the fork server and the Kubernetes API emulation.

Installed in the development environment only (`scripts/setup.sh`); the product wheel never
contains it. The tests and the benchmarks start engines, proxies and operators through it.
"""
