"""Weight publishing: making a new weight version live on every engine of the fleet.

Every publisher is a `base.Publisher` (its `collective` says whether every trainer rank takes
part in a publish), one module per transport: `disk` (engines load a checkpoint the trainer
wrote) and `collective` (the trainer broadcasts over a `torch.distributed` weight-update group;
`broadcast` is its sender to one group, `fleet` one group per engine, `membership` the pure
plan of who joins and leaves). The engines come from one `engines.EngineSource`: the proxy's
engine set, or a fixed URL list.
"""
