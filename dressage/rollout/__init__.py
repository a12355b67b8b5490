"""Rollout: samples and their versions, staleness control, and the collectors."""
