"""Allreduce ``tree``: a pipelined binary-tree allreduce, on one tree or on two
complementary trees (the double binary tree).

The message is cut into segments of ``seg`` bytes (0: one segment). Each segment is
reduced up a binary tree to its root and broadcast back down; a rank sends segment s up
while it still forwards earlier segments down, so the reduce of one segment overlaps the
broadcast of another, as NCCL's tree allreduce does (NCCL 2.4, "Massively scale your
deep learning training with NCCL 2.4", NVIDIA 2019).

- ``trees=1``: the heap-ordered binary tree rooted at rank 0 (rank r's children 2r+1,
  2r+2): MPICH's ``MPIR_Allreduce_intra_tree`` with its default tree (``kary``, k = 2;
  src/mpi/coll/allreduce/allreduce_intra_tree.c), which runs it whole
  (MPIR_CVAR_ALLREDUCE_TREE_PIPELINE_CHUNK_SIZE = 0): ``seg=0``.
- ``trees=2``: each segment is halved, one half per tree. The second tree is the first
  mirrored (rank r sits where rank p-1-r sits in the first), so the interior ranks of
  one tree, r < p/2, are leaves of the other: every rank is interior in at most one tree
  and a leaf in the other, for every p >= 2 (the complementary pair of Sanders, Speck and
  Traeff, "Two-tree algorithms for full bandwidth broadcast, reduction and scan",
  Parallel Computing 35(12), 2009; NCCL builds its double tree the same way). An interior
  rank then moves 2 n bytes each way, as a ring does, instead of the single tree's 3 n.

Cost (n bytes, p ranks, d = floor(lg p) levels, k segments, a piece of n / (k t) bytes on
each of the t trees; U and R the most pieces a rank sends (= receives) and reduces per
segment, U = 3, R = 2 for one tree and U = 4, R = 2 halves for two, for p >= 5):
the first segment's way up and down, d (2c (a + piece b) + c piece g) with c = min(2, p-1)
children per level, then one segment per step of the busiest rank,
(k - 1)(U (a + piece b) + R piece g); plus the out-of-place copy n b_intra. This is the
pipelined tree of Pjesivac-Grbovic et al., "Performance analysis of MPI collective
operations", Cluster Computing 10(2), 2007 (fill + (segments - 1) steps of the slowest
stage), with the reduction and the broadcast overlapped stage by stage.

Commutative ops (children are combined in arrival order, not rank order); any dtype, any
p, in place or not. Every rank ends with the root's bits, so the results agree exactly.
Scratch: one n-element receive buffer per child (at most two per rank), kept per shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from collectives import mpi
from collectives.common import Machine, Scratch, private_comm, reduce_into, start_in_place
from collectives.errors import UsageError
from collectives.registry import COMMUTATIVE_OP, Counterpart, Split, register, whole_message

if TYPE_CHECKING:
    from collections.abc import Mapping

    from mpi4py import MPI

DEFAULT_SEG = 256 * 1024
TREE_COUNTS = (1, 2)
# Tags of tree t's traffic: TAG_UP + t towards the root, TAG_DOWN + t away from it. The
# same two ranks can be linked in both trees and in both directions (p = 2).
TAG_UP, TAG_DOWN = 21, 31


def levels(p: int) -> int:
    """Levels below the root of the heap-ordered binary tree of p ranks: floor(lg p)."""
    return max(p, 1).bit_length() - 1


@dataclass(frozen=True)
class TreeLinks:
    """One rank's place in one tree: its parent (None at the root), its children and how
    many segments its broadcast lags behind its reduction (``lag``)."""

    parent: int | None
    children: tuple[int, ...]
    lag: int


def _rank_at(position: int, p: int, tree: int) -> int:
    """The rank at a heap position of tree ``tree`` (the second tree is mirrored)."""
    return position if tree == 0 else p - 1 - position


def _height(position: int, p: int) -> int:
    """Levels below a heap position (its leftmost path is the longest)."""
    height = 0
    while 2 * position + 1 < p:
        position, height = 2 * position + 1, height + 1
    return height


def tree_links(rank: int, p: int, tree: int) -> TreeLinks:
    """``rank``'s parent, children and lag in tree ``tree`` (0 or 1) of p ranks.

    The lag: in the steady state a segment climbs one level per step, so a rank at depth
    k with h levels below it reduces segment s while segment s - (d + k - h) comes back
    down (d = levels(p)); it is 0 at the root and grows down every path, which keeps the
    schedule free of deadlock (a parent never waits on a step its child takes later).
    """
    position = _rank_at(rank, p, tree)  # the mirror is its own inverse
    parent = _rank_at((position - 1) // 2, p, tree) if position else None
    children = tuple(_rank_at(c, p, tree) for c in (2 * position + 1, 2 * position + 2) if c < p)
    depth = (position + 1).bit_length() - 1
    return TreeLinks(parent, children, levels(p) + depth - _height(position, p))


@lru_cache(maxsize=1024)
def busiest_rank(p: int, trees: int) -> tuple[int, int]:
    """(pieces sent, pieces reduced) per segment by the busiest rank over ``trees`` trees:
    a rank sends (and receives) one piece per child and one to its parent, and reduces
    one per child. Each count is the most over all ranks: over ranks 0, 1, p-2 and p-1,
    since the children of the heap position r fall as r grows, those of the mirrored
    tree's position p-1-r rise, and both trees give a parent to every rank but its root."""
    sends = reductions = 0
    for rank in sorted({r for r in (0, 1, p - 2, p - 1) if 0 <= r < p}):
        links = [tree_links(rank, p, tree) for tree in range(trees)]
        sends = max(sends, sum(len(t.children) + (t.parent is not None) for t in links))
        reductions = max(reductions, sum(len(t.children) for t in links))
    return sends, reductions


def segments(n: float, seg: int) -> int:
    """How many segments of ``seg`` bytes an n-byte message is cut into (0: one)."""
    return max(1, math.ceil(n / seg)) if seg else 1


def _cost(m: Machine, p: int, n: float, seg: int = DEFAULT_SEG, trees: int = 1) -> float:
    """Seconds of the pipelined tree allreduce (module docstring)."""
    link, k = m.flat(p), segments(n, seg)
    piece = n / (k * trees)
    hop = link.alpha + piece * link.beta
    fanout = min(2, p - 1)
    fill = levels(p) * (2 * fanout * hop + fanout * piece * link.gamma)
    sends, reductions = busiest_rank(p, trees)
    steady = (k - 1) * (sends * hop + reductions * piece * link.gamma)
    return fill + steady + n * m.intra.beta


def _check_params(params: Mapping[str, int | str]) -> None:
    if params["trees"] not in TREE_COUNTS:
        raise UsageError(f"tree: trees expects 1 or 2, got {params['trees']!r}")


def _pieces(n: int, step: int, trees: int) -> list[list[slice]]:
    """Per tree, its piece of every segment of ``step`` elements: the segment itself on
    one tree, its first and second half on two."""
    per_tree: list[list[slice]] = [[] for _ in range(trees)]
    for lo in range(0, n, step):
        hi = min(lo + step, n)
        cuts = (lo, hi) if trees == 1 else (lo, lo + (hi - lo + 1) // 2, hi)
        for tree in range(trees):
            per_tree[tree].append(slice(cuts[tree], cuts[tree + 1]))
    return per_tree


class _Pipeline:
    """One call's schedule on one rank: per tree, the segments' pieces go up (wait for
    the children's, reduce them in, send to the parent) and, ``lag`` steps later, come
    down (receive from the parent, forward to the children)."""

    def __init__(self, comm: MPI.Comm, op: Any, buf: Any, child_bufs: list[Any]) -> None:
        self.comm, self.op, self.buf, self.child_bufs = comm, op, buf, child_bufs
        self.up_sends: dict[tuple[int, int], Any] = {}
        self.down_sends: list[Any] = []

    def post_child_receives(self, tree: int, links: TreeLinks, pieces: list[slice]) -> list:
        """Every piece from every child, posted at once so they stream in (per piece, one
        request per child)."""
        return [
            [
                self.comm.Irecv(self.child_bufs[i][piece], child, TAG_UP + tree)
                for i, child in enumerate(links.children)
            ]
            for piece in pieces
        ]

    def up(self, tree: int, links: TreeLinks, piece: slice, index: int, receives: list) -> None:
        """Reduce the children's piece into ours and send the sum towards the root."""
        if receives:
            mpi.Request.Waitall(receives)
            for child_buf in self.child_bufs[: len(receives)]:
                reduce_into(self.op, self.buf[piece], child_buf[piece])
        if links.parent is not None:
            request = self.comm.Isend(self.buf[piece], links.parent, TAG_UP + tree)
            self.up_sends[(tree, index)] = request

    def down(self, tree: int, links: TreeLinks, piece: slice, index: int) -> None:
        """Take the finished piece from the parent and hand it to the children."""
        if links.parent is not None:
            # The piece went up from this very memory: it is received into only once
            # that send has completed, as MPI requires of a send buffer.
            self.up_sends.pop((tree, index)).Wait()
            self.comm.Recv(self.buf[piece], links.parent, TAG_DOWN + tree)
        for child in links.children:
            self.down_sends.append(self.comm.Isend(self.buf[piece], child, TAG_DOWN + tree))

    def finish(self) -> None:
        """Wait for every send still in flight."""
        mpi.Request.Waitall([*self.up_sends.values(), *self.down_sends])


def _run(comm: MPI.Comm, op: Any, buf: Any, child_bufs: list[Any], plan: list, step: int):
    """All segments of ``buf`` through the trees of ``plan`` ([(tree, links)])."""
    pieces = _pieces(len(buf), step, len(plan))
    count = len(pieces[0])
    pipe = _Pipeline(comm, op, buf, child_bufs)
    receives = {tree: pipe.post_child_receives(tree, links, pieces[tree]) for tree, links in plan}
    most_lag = max(links.lag for _, links in plan)
    for step_index in range(count + most_lag):
        if step_index < count:
            for tree, links in plan:
                piece = pieces[tree][step_index]
                pipe.up(tree, links, piece, step_index, receives[tree][step_index])
        for tree, links in plan:
            index = step_index - links.lag
            if 0 <= index < count:
                pipe.down(tree, links, pieces[tree][index], index)
    pipe.finish()


@register(
    "allreduce",
    "tree",
    summary="pipelined binary-tree reduce + bcast in seg-byte segments, on 1 or 2 trees",
    requires=(COMMUTATIVE_OP,),
    grid={"seg": (0, 64 * 1024, DEFAULT_SEG, 1024 * 1024), "trees": TREE_COUNTS},
    # seg cuts the whole message (each segment then halved between two trees), so a
    # segment at least as large as the message runs what seg=0 runs.
    split=Split("seg", whole_message, zero_means_whole=True),
    cost=_cost,
    check_params=_check_params,
    equivalents={
        # MPICH's selection file must then carry the tree's parameters (tree_type, k,
        # chunk_size, buffer_per_child): csel.c leaves them unset otherwise, and MPICH
        # 5.0.2 aborts at MPI_Init with "Invalid tree type". The exporter writes none.
        "mpich": Counterpart(
            "MPIR_Allreduce_intra_tree", params={"seg": 0, "trees": 1}, exported=False
        ),
    },
)
def tree(comm: MPI.Comm, seg: int = DEFAULT_SEG, trees: int = 1):
    """Bind the pipelined tree allreduce (``seg`` bytes per segment, 0 = whole message;
    ``trees`` 1, or 2 for the double binary tree)."""
    _check_params({"trees": trees})
    comm = private_comm(comm)
    rank, p, scratch = comm.Get_rank(), comm.Get_size(), Scratch()
    # The trees where this rank is a leaf first: their pieces go up at once, before the
    # rank waits on its children in the other tree.
    plan = sorted(
        ((t, tree_links(rank, p, t)) for t in range(trees)), key=lambda tl: len(tl[1].children)
    )
    most_children = max(len(links.children) for _, links in plan)

    def call(send, recv, op, root):
        buf = start_in_place(send, recv)
        if p == 1 or len(buf) == 0:
            return
        step = max(1, seg // buf.itemsize) if seg else len(buf)
        child_bufs = [scratch.get(f"child{i}", len(buf), buf) for i in range(most_children)]
        _run(comm, op, buf, child_bufs, plan, step)

    return call
