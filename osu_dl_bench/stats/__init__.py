"""The statistics every floor shares, pure numpy and scipy (no MPI, nothing of the floors
above): a robust scale (robust), bootstraps (bootstrap), variance components and their
degrees of freedom (components), ratios with Student's t intervals (intervals), smooth
curves over size (smoothing) and the decision rule with its one default (decision).
"""
