"""Agents produce prompt groups: `(prompt index, attempt) -> Group` through the proxy.

Modules: `groups` (group ids, sampling seeds, running a group's trajectories in their own
proxy sessions), `single_turn` (one answer per trajectory), `whitebox` (our multi-turn loop
over an environment), `blackbox` (an unmodified program speaking the OpenAI chat API). Which
agent a job uses is decided by the orchestrator from the job; rollout schedules the groups.
"""
