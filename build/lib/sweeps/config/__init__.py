"""Configuration: Hydra composition (the only Hydra importer), validation, and the frozen ``SweepSpec``."""
