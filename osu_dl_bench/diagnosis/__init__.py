"""Diagnosis: which rank, node or link is late, slow or stalled, with the evidence."""
