"""Ray glue: the resource plan, starting Ray, the Tuner, and the Train -> Tune bridge each trial runs."""
