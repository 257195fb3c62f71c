"""Command-line entry points (`compute.py`/`ecompute`, `schedule.py`/`eschedule`)."""
