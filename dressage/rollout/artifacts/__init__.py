"""Artifacts produced by rollout: training samples and their version metadata."""
