"""Reports: trial records read from Ray storage, the pure summary, and its renderers (tables, plots)."""
