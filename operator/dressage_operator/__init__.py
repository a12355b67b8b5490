"""The Dressage Kubernetes operator (kopf): reconciles `AsyncRLJob` custom resources.

The package is named `dressage_operator`, never `operator`, which would shadow the standard
library module of that name.
"""
