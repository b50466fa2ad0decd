"""Every use of a private surface of Ray, Tune, Train, Optuna or Hydra: one module per lever."""
