"""Diagnosis: which rank, node or link is late, slow or stalled, with the evidence."""

# Here, not in ranks.py (pandas, scipy), so triage's option parsing reads it without them.
# A lag under half the call's own time beyond the peers' is left unnamed by default: the
# barrier before each call releases ranks up to a message latency apart, always in the
# same order (MPICH's dissemination barrier: log2(p) rounds; 4 ranks on one host: the
# last one 11 us behind, the others 5-6 us, on calls of 14-20 us of their own, last at
# 94-100% of them), and the benchmark's barrier is not the rank's fault.
MIN_SHARE = 0.5
