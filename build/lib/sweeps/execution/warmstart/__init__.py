"""The warm trial start: which levers a sweep uses, the lean trainer, the process pool, the reaper."""
