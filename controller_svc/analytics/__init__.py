"""State-change analytics on Spark (DESIGN.md contract 6): invariants, availability, failovers.

Modules that import PySpark (ingest, timelines, invariants, job) are only imported by
`controller-svc analyze`; schema and report are plain Python.
"""
