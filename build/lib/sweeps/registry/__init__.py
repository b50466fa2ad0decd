"""Promotion to the MLflow Model Registry: the gate (pure rules), the model package, the registry writes."""
