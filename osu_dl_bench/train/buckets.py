"""Flat storage for parameters and gradient buckets.

- ``flatten_state``: moves parameters and buffers into one contiguous tensor per dtype
  (each tensor's ``.data`` becomes a view), so the start-up broadcast is one zero-copy
  call per dtype on a numpy view.
- ``plan_buckets``: PyTorch DDP's bucket assignment (compute_bucket_assignment_by_size in
  torch/csrc/distributed/c10d/reducer.cpp): parameters in reverse registration order, so
  buckets fill in the order backward produces gradients; one open bucket per dtype; a
  bucket closes once it reaches its cap, the first one at ``first_cap`` (1 MiB) so
  communication starts early, the others at ``cap`` (25 MiB).
- ``GradBucket``: one flat gradient tensor per bucket whose slices are the parameters'
  ``.grad`` (DDP's gradient_as_bucket_view): autograd accumulates straight into the
  buffer that is reduced, so a step copies nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from osu_dl_bench.train.device import array_view


def flatten_state(tensors: Iterable[torch.Tensor]) -> list[torch.Tensor]:
    """One flat tensor per dtype (in order of first appearance) holding ``tensors``, whose
    ``.data`` now views it. Collective-free; the same layout on every rank."""
    groups: dict[torch.dtype, list[torch.Tensor]] = {}
    for tensor in tensors:
        groups.setdefault(tensor.dtype, []).append(tensor)
    flats = []
    for members in groups.values():
        flat = torch.cat([t.detach().reshape(-1) for t in members])
        offset = 0
        for tensor in members:
            tensor.data = flat[offset : offset + tensor.numel()].view_as(tensor)
            offset += tensor.numel()
        flats.append(flat)
    return flats


def plan_buckets(sizes: Sequence[tuple[int, str]], cap: int, first_cap: int) -> list[list[int]]:
    """Indices of (nbytes, dtype) tensors grouped into buckets, each bucket's indices in
    reverse order, buckets in the order their first tensor is reached from the end."""
    open_buckets: dict[str, list[int]] = {}
    filled: dict[str, int] = {}
    closed_count: dict[str, int] = {}
    done: list[list[int]] = []
    for index in reversed(range(len(sizes))):
        nbytes, dtype = sizes[index]
        bucket = open_buckets.setdefault(dtype, [])
        bucket.append(index)
        filled[dtype] = filled.get(dtype, 0) + nbytes
        limit = first_cap if closed_count.get(dtype, 0) == 0 else cap
        if filled[dtype] >= limit:
            done.append(bucket)
            open_buckets[dtype], filled[dtype] = [], 0
            closed_count[dtype] = closed_count.get(dtype, 0) + 1
    done += [b for b in open_buckets.values() if b]
    # The highest index comes first in backward: order buckets by their first tensor.
    return sorted(done, key=lambda b: -b[0])


@dataclass(eq=False)
class GradBucket:
    """Parameters whose gradients live in one flat tensor (and its numpy or cupy view)."""

    index: int
    params: list[torch.nn.Parameter]
    flat: torch.Tensor
    array: np.ndarray

    @property
    def nbytes(self) -> int:
        """Bytes reduced for this bucket per step (uncompressed)."""
        return self.array.nbytes


def make_buckets(
    params: Sequence[torch.nn.Parameter],
    cap: int,
    first_cap: int,
    zeros: Callable[[int, np.dtype], np.ndarray] | None = None,
    plan_itemsize: int | None = None,
    device: torch.device | None = None,
) -> list[GradBucket]:
    """Plan buckets over ``params`` and point every ``.grad`` into its bucket's buffer;
    ``zeros(count, dtype)`` allocates the buffers (e.g. in registered memory, which the
    node's other ranks can read directly), else torch does. ``plan_itemsize``: plan as
    if every element had that many bytes (the float64 copy of a float32 run keeps its
    buckets). ``device``: where torch allocates them (a GPU: the views are cupy's)."""
    sizes = [(p.numel() * (plan_itemsize or p.element_size()), str(p.dtype)) for p in params]
    buckets = []
    for number, indices in enumerate(plan_buckets(sizes, cap, first_cap)):
        members = [params[i] for i in indices]
        count, dtype = sum(p.numel() for p in members), members[0].dtype
        if zeros is None:
            flat = torch.zeros(count, dtype=dtype, device=device)
        else:
            flat = torch.from_numpy(zeros(count, torch.empty(0, dtype=dtype).numpy().dtype))
        offset = 0
        for param in members:
            param.grad = flat[offset : offset + param.numel()].view_as(param)
            offset += param.numel()
        buckets.append(GradBucket(number, members, flat, array_view(flat)))
    return buckets
