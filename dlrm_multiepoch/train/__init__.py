"""Training: config and CLI, sharding and optimizers, the trainer loop, evaluation, logging, checkpoints, pre-training."""
