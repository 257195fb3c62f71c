"""Validators generated ahead of time from the schemas by tools/compile_schemas.py.

Each module carries the digest of what it was generated from; `schemas._compiled` uses it
only while that still matches, so a stale one is never used (regenerate after changing a
schema: `.venv/bin/python tools/compile_schemas.py`; a unit test says when to).
"""
