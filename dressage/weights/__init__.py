"""Weight publishing: making a new weight version live on every engine of the fleet.

One module per transport (`disk`: engines load a checkpoint the trainer wrote; `collective`:
the trainer broadcasts over a `torch.distributed` weight-update group) and the fleet's
membership of that group beside them.
"""
