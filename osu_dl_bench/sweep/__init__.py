"""Sweeps: collectives x algorithms x sizes x process counts, stored point by point."""
