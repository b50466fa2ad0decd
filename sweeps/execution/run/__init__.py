"""The running sweep: its one owner (``owner.Run``), its live side (session, callbacks, live status, control,
progress, stall watchdog, start-up clock, budgets, gates) and the Tune state on disk it keeps (recovery, scheduler
state)."""
