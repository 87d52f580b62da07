"""Hostile-input driver: ranks pass one cma or shm collective call different arguments.

Run under mpiexec by tests/mpi/test_mismatched_counts.py. In every case every rank must raise
CountMismatch with the same message, naming the rank at fault and both byte counts (or
element types, roots, buffers); no byte of any buffer, nor of the canaries around it, may
change (nothing is copied); and the binding must stay usable: a matching call right after
gives the right result. Calls whose ranks agree on all that matters (shapes of the same
element count, 2-D buffers) must instead return the right result. Ends with one
``SUMMARY {json}`` line from rank 0, as tests/drivers/check_algorithms.py does.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

import numpy as np

from osu_dl_bench.runtime.guard import run_guarded
from osu_dl_bench.runtime.start import init_mpi

MPI = init_mpi("single")

from collectives import cma, registered, shm  # noqa: E402
from collectives.errors import CountMismatch  # noqa: E402
from collectives.ops import reduce_op  # noqa: E402

MARGIN = 64  # canary elements before, between and after the buffers
CANARY = 0x5A
N = 3001  # float64 elements: several 4 KiB chunks, not divisible by p
LONGER = 1000  # elements past a peer's buffer an unchecked bcast once wrote
MUCH_LONGER = 200_000  # beyond the shared window a 24 KB call leaves: shm must grow
SUM = reduce_op("sum")


@dataclass(frozen=True)
class Case:
    """One mismatched call: per rank its count, send count (None: in place), element type,
    root, and whether its buffer is strided or read-only; the message every rank expects."""

    name: str
    counts: tuple[int, ...]
    expected: str
    sends: tuple[int, ...] | None = None
    dtypes: tuple[str, ...] | None = None
    roots: tuple[int, ...] | None = None
    strided: int = -1  # this rank passes a strided view
    readonly: int = -1  # this rank passes a read-only (receive) buffer
    shapes: tuple[tuple[int, ...], ...] | None = None  # per rank, of the same element count
    ops: tuple[str, ...] | None = None  # per rank (allreduce)
    huge_roots: tuple[int, ...] | None = None  # per rank, roots past int64 (bcast)


def _nbytes(count: int, dtype: str = "float64") -> int:
    return count * np.dtype(dtype).itemsize


def _counts(p: int, rank: int, count: int) -> tuple[int, ...]:
    return tuple(count if r == rank else N for r in range(p))


def _count_case(name: str, p: int, odd: int, count: int, ref: int, label: str) -> Case:
    """Rank ``odd`` passes ``count`` elements, the others N; the message compares it with
    rank ``ref`` (rank 0, or the root)."""
    counts = _counts(p, odd, count)
    named = next(r for r in range(p) if r != ref and counts[r] != counts[ref])
    expected = (
        f"rank {named} passed {_nbytes(counts[named])} bytes, "
        f"{label} passed {_nbytes(counts[ref])} bytes"
    )
    return Case(name, counts, expected)


def allreduce_cases(p: int, algorithm: str) -> list[Case]:
    """Mismatched counts in place and not, then the other mismatched arguments."""
    last, half = p - 1, N // 2
    base = [
        _count_case("last rank shorter", p, last, half, 0, "rank 0"),
        _count_case("last rank longer", p, last, N + LONGER, 0, "rank 0"),
        _count_case("last rank much longer", p, last, N + MUCH_LONGER, 0, "rank 0"),
        _count_case("rank 0 empty", p, 0, 0, 0, "rank 0"),
        _count_case("rank 1 empty", p, 1, 0, 0, "rank 0"),
    ]
    cases = [Case(f"{c.name}, in place", c.counts, c.expected) for c in base]
    cases += [Case(f"{c.name}, out of place", c.counts, c.expected, c.counts) for c in base]
    cases.append(
        Case(
            "rank 1's send buffer shorter than its receive buffer",
            (N,) * p,
            f"rank 1 passed a send buffer of {_nbytes(half)} bytes and a receive buffer of "
            f"{_nbytes(N)} bytes",
            sends=_counts(p, 1, half),
        )
    )
    cases.append(
        Case(
            "rank 1 float32, same bytes",
            _counts(p, 1, 2 * N),
            "rank 1 passed float32 elements, rank 0 passed float64",
            dtypes=tuple("float32" if r == 1 else "float64" for r in range(p)),
        )
    )
    cases.append(Case("rank 1 read-only", (N,) * p, "rank 1 passed a read-only", readonly=1))
    cases += _type_and_shape_cases(p, 0, "rank 0")
    cases.append(
        Case(
            "rank 1 another op",
            (N,) * p,
            "rank 1 passed op max, rank 0 passed op sum",
            ops=tuple("max" if r == 1 else "sum" for r in range(p)),
        )
    )
    if algorithm == "cma":
        cases.append(Case("rank 1 strided", (N,) * p, "rank 1 passed a non-contiguous", strided=1))
    return cases


def bcast_cases(p: int, algorithm: str) -> list[Case]:
    """Mismatched counts from root 0 and from the last rank, then the other arguments."""
    cases = []
    for root in sorted({0, p - 1}):
        label, peer = f"rank {root} (the root)", (root + 1) % p
        counted = [
            _count_case("a peer shorter", p, peer, N // 2, root, label),
            _count_case("a peer longer", p, peer, N + LONGER, root, label),
            _count_case("a peer much longer", p, peer, N + MUCH_LONGER, root, label),
            _count_case("the root shorter", p, root, N // 2, root, label),
            _count_case("the root empty", p, root, 0, root, label),
            _count_case("a peer empty", p, peer, 0, root, label),
        ]
        for c in counted:
            roots = (root,) * p
            cases.append(Case(f"{c.name}, root {root}", c.counts, c.expected, roots=roots))
        roots = tuple(peer if r == peer else root for r in range(p))
        named = next(r for r in range(1, p) if roots[r] != roots[0])
        cases.append(
            Case(
                f"a peer names another root, root {root}",
                (N,) * p,
                f"rank {named} passed root {roots[named]}, rank 0 passed root {roots[0]}",
                roots=roots,
            )
        )
        cases.append(
            Case(
                f"a peer float32, same bytes, root {root}",
                _counts(p, peer, 2 * N),
                f"rank {peer} passed float32 elements, {label} passed float64",
                dtypes=tuple("float32" if r == peer else "float64" for r in range(p)),
                roots=(root,) * p,
            )
        )
        cases.append(
            Case(
                f"a peer read-only, root {root}",
                (N,) * p,
                f"rank {peer} passed a read-only",
                roots=(root,) * p,
                readonly=peer,
            )
        )
        cases += _type_and_shape_cases(p, root, label, (root,) * p)
        huge = 1 << 63
        cases.append(
            Case(
                f"a peer names root 2^63, root {root}",
                (N,) * p,
                f"rank {peer} passed root beyond int64, rank 0 passed root {root}"
                if peer
                else f"rank 1 passed root {root}, rank 0 passed root beyond int64",
                roots=(root,) * p,
                huge_roots=tuple(huge if r == peer else root for r in range(p)),
            )
        )
        low = -(1 << 62)  # was the marker of "no root"
        cases.append(
            Case(
                f"every rank names root -2^62, root {root}",
                (N,) * p,
                f"every rank passed root {low}, which is not a rank (there are {p})",
                roots=(low,) * p,
            )
        )
        cases.append(
            Case(
                f"every rank names root {p + root}",
                (N,) * p,
                f"every rank passed root {p + root}, which is not a rank (there are {p})",
                roots=(p + root,) * p,
            )
        )
        if algorithm == "cma":
            cases.append(
                Case(
                    f"a peer strided, root {root}",
                    (N,) * p,
                    f"rank {peer} passed a non-contiguous",
                    roots=(root,) * p,
                    strided=peer,
                )
            )
    return cases


def _type_and_shape_cases(
    p: int, ref: int, label: str, roots: tuple[int, ...] | None = None
) -> list[Case]:
    """Rank ``ref`` (rank 0 or the root) big-endian; then shapes that must work."""
    named = 1 if ref == 0 else 0  # the first rank whose type differs from rank ref's
    endian = Case(
        "the reference rank big-endian",
        (N,) * p,
        f"rank {named} passed float64 elements, {label} passed float64 (big-endian)",
        dtypes=tuple(">f8" if r == ref else "float64" for r in range(p)),
        roots=roots,
    )
    flat_2d = tuple((N, 1) if r == 0 else (N,) for r in range(p))
    return [
        endian,
        Case("rank 0 2-D, the others 1-D", (N,) * p, "", roots=roots, shapes=flat_2d),
        Case("every rank 2-D", (N,) * p, "", roots=roots, shapes=((1, N),) * p),
    ]


def _fill(array: np.ndarray, base: float) -> None:
    array[...] = base + np.arange(len(array)) % 13


class Buffers:
    """One rank's buffers for a call, carved from one larger array (private or registered)
    with canaries before, between and after them."""

    def __init__(self, xp, dtype: str, count: int, send: int | None, strided: bool) -> None:
        span = 2 * count if strided else count
        total = 3 * MARGIN + span + (send or 0)
        self.backing = xp.empty(total, dtype)
        self.backing.view(np.uint8)[...] = CANARY
        lo = MARGIN
        self.send = None
        if send is not None:
            self.send = self.backing[lo : lo + send]
            lo += send + MARGIN
        self.where = slice(lo, lo + span, 2 if strided else 1)
        self.recv = self.backing[self.where]

    def reshape(self, shape: tuple[int, ...]) -> None:
        """Pass the buffers to the call in ``shape`` (the same elements)."""
        self.recv = self.recv.reshape(shape)
        if self.send is not None:
            self.send = self.send.reshape(shape)

    def snapshot(self) -> np.ndarray:
        """Every byte of the backing array, canaries included."""
        return self.backing.view(np.uint8).copy()

    def unchanged(self, before: np.ndarray) -> bool:
        """Whether no byte of the backing array changed since ``before``."""
        return bool(np.array_equal(self.backing.view(np.uint8), before))


def _buffers(xp, case: Case, me: int, collective: str) -> Buffers:
    dtype = case.dtypes[me] if case.dtypes else "float64"
    send = case.sends[me] if case.sends else None
    bufs = Buffers(xp, dtype, case.counts[me], send, case.strided == me)
    if collective == "allreduce":
        _fill(bufs.send if send is not None else bufs.recv, 1000.0 * (me + 1))
        if send is not None:
            bufs.recv[...] = -1
    else:
        root = case.roots[me]
        _fill(bufs.recv, 7.0 if me == root else -50.0)
    if case.readonly == me:
        bufs.recv.flags.writeable = False
    if case.shapes:
        bufs.reshape(case.shapes[me])
    return bufs


def _outcome(call, bufs: Buffers, root: int, op=SUM) -> str:
    """'raised: MESSAGE' for a CountMismatch, else what happened instead."""
    try:
        call(bufs.send, bufs.recv, op, root)
    except CountMismatch as exc:
        return f"raised: {exc}"
    except Exception as exc:  # noqa: BLE001  (any other error is a failure to report)
        return f"{type(exc).__name__}: {exc}"
    return "returned"


def _matching_call_ok(
    call, xp, me: int, p: int, collective: str, in_place: bool, shapes=None
) -> bool:
    """A call every rank makes alike (but for ``shapes``) right after the mismatched one:
    right result, no canary touched."""
    sends = None if in_place else (N,) * p
    case = Case("matching", (N,) * p, "", sends=sends, roots=(0,) * p, shapes=shapes)
    bufs = _buffers(xp, case, me, collective)
    # What the call must leave: its send buffer, the canaries, the result in recv.
    wanted = np.array(bufs.backing, copy=True)
    call(bufs.send, bufs.recv, SUM, 0)
    expected = np.full(N, 7.0) + np.arange(N) % 13
    if collective == "allreduce":
        expected = 1000.0 * sum(range(1, p + 1)) + p * (np.arange(N) % 13)
    wanted[bufs.where] = expected
    return bufs.unchanged(wanted.view(np.uint8))


def _bindings(comm, algorithms: list[str], p: int):
    """(label, collective, call, cases) for every algorithm under test."""
    out = []
    if "cma" in algorithms and cma.unavailable_reason() is None:
        out.append(("cma:chunk=4K", "allreduce", cma.allreduce(comm, 4096), "cma"))
        out.append(("cma", "bcast", cma.bcast(comm), "cma"))
    if "shm" in algorithms:
        for chunk, label in ((4096, "4K"), (1 << 20, "1M")):
            out.append((f"shm:chunk={label}", "allreduce", shm.allreduce(comm, chunk), "shm"))
            out.append((f"shm:chunk={label}", "bcast", shm.bcast(comm, chunk), "shm"))
    cases = {"allreduce": allreduce_cases, "bcast": bcast_cases}
    return [(lab, coll, call, cases[coll](p, algo)) for lab, coll, call, algo in out]


def _device(kind: str, me: int):
    if kind == "cpu" or (kind == "mixed" and me == 1):
        return np
    return registered.ARRAYS


def run(args) -> list[dict]:
    """Every case on every binding and buffer kind; per case this rank's record."""
    comm = MPI.COMM_WORLD
    me, p = comm.Get_rank(), comm.Get_size()
    records = []
    for label, collective, call, cases in _bindings(comm, args.algorithms, p):
        for kind in args.devices:
            xp = _device(kind, me)
            for case in cases:
                if not case.expected:  # ranks that agree: the call must just work
                    for in_place in (True, False):
                        ok = _matching_call_ok(call, xp, me, p, collective, in_place, case.shapes)
                        records.append(
                            {
                                "case": f"{collective} {label} -d {kind}: {case.name}"
                                f"{', in place' if in_place else ', out of place'}",
                                "expected": "",
                                "outcome": "returned",
                                "unchanged": ok,
                                "after": True,
                            }
                        )
                    continue
                bufs = _buffers(xp, case, me, collective)
                before = bufs.snapshot()
                root = case.roots[me] if case.roots else 0
                if case.huge_roots:
                    root = case.huge_roots[me]
                op = reduce_op(case.ops[me]) if case.ops else SUM
                outcome = _outcome(call, bufs, root, op)
                records.append(
                    {
                        "case": f"{collective} {label} -d {kind}: {case.name}",
                        "expected": case.expected,
                        "outcome": outcome,
                        "unchanged": bufs.unchanged(before),
                        "after": _matching_call_ok(call, xp, me, p, collective, case.sends is None),
                    }
                )
    return records


def verdicts(per_rank: list[list[dict]]) -> dict:
    """Rank 0's summary of every rank's records."""
    passed, failures = 0, []
    for rows in zip(*per_rank, strict=True):
        case, expected = rows[0]["case"], rows[0]["expected"]
        outcomes = {row["outcome"] for row in rows}
        problems = []
        if len(outcomes) != 1:
            problems.append(f"ranks disagree: {[row['outcome'] for row in rows]}")
        for rank, row in enumerate(rows):
            if not expected:
                if row["outcome"] != "returned" or not row["unchanged"]:
                    problems.append(f"rank {rank}: {row['outcome']}, wrong result or canaries")
                continue
            if not row["outcome"].startswith("raised: ") or expected not in row["outcome"]:
                problems.append(f"rank {rank}: {row['outcome']!r}, expected {expected!r}")
            if not row["unchanged"]:
                problems.append(f"rank {rank}: its buffers or canaries changed")
            if not row["after"]:
                problems.append(f"rank {rank}: the matching call after it went wrong")
        if problems:
            failures.append(f"{case}: " + "; ".join(problems))
        else:
            passed += 1
    return {"passed": passed, "failed": len(failures), "skipped": 0, "failures": failures[:80]}


def summarize(argv: list[str] | None = None) -> dict:
    """Every case on every rank (options ``argv``; None: the command line); returns rank
    0's summary, on every rank."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--algorithms", default="cma,shm")
    parser.add_argument("--devices", default="cpu,cpu-registered,mixed")
    args = parser.parse_args(argv)
    args.algorithms = args.algorithms.split(",")
    args.devices = args.devices.split(",")
    comm = MPI.COMM_WORLD
    per_rank = comm.gather(run(args), root=0)
    summary = None
    if comm.Get_rank() == 0:
        summary = verdicts(per_rank)
        summary["nprocs"] = comm.Get_size()
    return comm.bcast(summary, root=0)


def main() -> int:
    summary = summarize()
    if MPI.COMM_WORLD.Get_rank() == 0:
        print("SUMMARY " + json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(run_guarded(main))
