"""The GRPO trainer (torch).

Modules: `loss` (pure tensor math), `batch` (samples -> padded tensors), `policy` (token
logprobs and entropy of a causal LM), `grpo` (one optimizer step, data-parallel), `checkpoint`
(resumable state), `publish` (weight versions pushed to the engines), `distributed`
(torch.distributed set-up from the torchrun environment), `cli` (`dressage train`).

Importing this package does not import torch; its modules do.
"""
