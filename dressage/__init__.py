"""Dressage: asynchronous RL training for LLM agents that keeps stale data out of the trainer."""

__version__ = "0.1.0"
