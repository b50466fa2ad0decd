"""The Tuner of a sweep: searchers, schedulers, stoppers, budgets and the callbacks that watch it."""
