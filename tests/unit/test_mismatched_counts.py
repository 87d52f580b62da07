"""Ranks that pass one cma or shm collective call different counts (the classic MPI
mistake) get the same CountMismatch on every rank, nothing is copied and no byte around
the buffers changes; the CLI ends such a run with a non-zero exit and no hang."""

import numpy as np
import pytest

from collectives import shm
from collectives.ops import reduce_op


@pytest.mark.parametrize("root", [1 << 63, -(1 << 63) - 1, -(1 << 62), "0", 2.5])
def test_a_signature_encodes_any_root_without_raising(root):
    """A root a rank cannot publish as an int64 becomes a flag, never an exception before
    the sync its peers wait at; none of them counts as a valid root."""
    mine = shm.signature(None, np.ones(4), root, 4096, True, False)
    assert mine.ranks_needed > 1 << 20


def test_a_signature_tells_byte_orders_shapes_and_ops_apart():
    """Big- and little-endian float64 differ; shapes of the same elements do not; ops do."""
    words = [
        shm.signature(None, np.ones(6, ">f8"), None, 0, True, False).raw,
        shm.signature(None, np.ones(6, "<f8"), None, 0, True, False).raw,
        shm.signature(None, np.ones((3, 2), "<f8"), None, 0, True, False).raw,
        shm.signature(None, np.ones(6), None, 0, True, False, reduce_op("max")).raw,
    ]
    assert words[0] != words[1] and words[1] == words[2] and words[3] != words[1]
