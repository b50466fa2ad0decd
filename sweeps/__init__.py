"""sweeps: hyperparameter sweeps on Ray Tune + Ray Train, tracked in MLflow, composed with Hydra."""

__version__ = "0.1.0"
