"""Every use of a private surface of Ray, Tune, Train, Optuna or Hydra: one module per lever, nowhere else.

A *lever* is a speed-up or a fix that needs a name its library does not promise to keep (``ray._private``, a
``_leading_underscore`` attribute, an internal class). Each lever module holds that code and one
:class:`~sweeps.execution.levers.core.Lever`, which says what it does, which library versions it was read
against, what the caller does instead, and a probe of the surfaces it calls (present, with the parameters it
passes). :func:`~sweeps.execution.levers.core.applies` decides once per process whether a lever is used: the
installed version is a checked one and the probe passes; when it is not, one log line says so and the caller
takes its public fallback. ``tests/test_architecture.py`` refuses private names outside this folder.

``SWEEPS_TEST_RAY_VERSION=X`` pretends another Ray, ``SWEEPS_LEVERS_OFF=all`` (or a comma list of names) turns
levers off: tests run every fallback on the installed libraries that way. ``python -m sweeps doctor`` lists
them; docs/ray.md ("Levers") says which versions each was checked on.
"""
