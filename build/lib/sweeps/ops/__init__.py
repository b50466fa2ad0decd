"""Operations: the run pipeline, resume/extend, sync, nightly schedules and doctor, built from the layers
below (config, execution, tracking, reports, registry)."""
