"""Whitebox environments: multi-turn text tasks whose loop runs in our own code."""
