"""One trial: a Ray Train TorchTrainer per (re)start, bridged to Tune, or its loop in the trial's own process."""
