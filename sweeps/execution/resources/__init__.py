"""The resource plan: what a trial holds, how many run at once, where results go (pre-flight checks)."""
