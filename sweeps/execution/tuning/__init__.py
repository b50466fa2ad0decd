"""The Tuner's assembly: the searcher, the scheduler, the trial function and its resources, Tune's configs."""
