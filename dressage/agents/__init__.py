"""Agents: how a trajectory is produced (whitebox loops in our code, blackbox programs)."""
