"""The GRPO trainer: a torch library, wired into a run by `dressage.orchestrator`.

Modules: `loss` (pure tensor math), `batch` (batches -> padded tensors, advantages, the one
place non-last-version tokens are masked, sharding), `grpo` (the policy's token logprobs and
entropy, one data-parallel optimizer step), `checkpoint` (resumable state), `session` (a
trainer bound to its run directory), `distributed` (torch.distributed set-up from the torchrun
environment). Batches and tiny models for tests live in the test support,
`dressage_testkit.trainer`.

Importing this package does not import torch; its modules do.
"""
