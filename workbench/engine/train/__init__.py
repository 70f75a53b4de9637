"""workbench.engine.train: the trainer actor, its worker group and FSDP2 sharding."""
