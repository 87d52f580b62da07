"""PyTorch DDP's bucket defaults, the one home that the trainer's options, the traffic
plans (train.traffic) and ``bench --buckets``'s header read; imports nothing, so reading
them loads neither the trainer's options nor torch."""

# PyTorch DDP's defaults: bucket_cap_mb=25 and dist._DEFAULT_FIRST_BUCKET_BYTES (1 MiB)
# (torch/nn/parallel/distributed.py); the small first bucket starts communication early
# in backward.
DEFAULT_BUCKET_CAP = 25 << 20
DEFAULT_FIRST_BUCKET = 1 << 20
