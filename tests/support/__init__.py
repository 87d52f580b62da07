"""Helpers the unit and MPI tests share (tests/ is on sys.path: see conftest.py)."""
