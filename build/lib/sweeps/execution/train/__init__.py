"""One trial: a Ray Train TorchTrainer per (re)start, bridged to Tune."""
