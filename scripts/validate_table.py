"""Check a tuning table against a separate sweep (not the run it was built from).

    python scripts/validate_table.py TABLE RUN_DIR [--out results/validation]

For every (collective, p) of RUN_DIR and every measured size, the runtime selector's
choice (from TABLE) is looked up among that run's interleaved measurements and compared,
by median over rounds, with the best candidate measured there and with native (twins,
variants whose chunk or segment size has no effect at a size, count as one: older sweeps
timed them apart, and the best of equal codes is only the luckiest draw). The
targets: chosen <= 1.05 x best everywhere (median of the ratios <= 1.03) and chosen
<= 1.05 x native everywhere. Prints a per-size table and a verdict per (collective, p).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table")
    parser.add_argument("run_dir")
    parser.add_argument("--out", default=None, help="also write OUT.txt")
    args = parser.parse_args()

    from osu_dl_bench.runtime import init_mpi

    init_mpi()
    from osu_dl_bench.measurement.store import RunStore
    from osu_dl_bench.selection.selector import Query, Selector, default_context
    from osu_dl_bench.selection.tune import point_representatives, without_twins

    selector = Selector.from_file(args.table)
    frame = RunStore(args.run_dir).load()
    lines = [
        f"# table {args.table} checked against the separate run {args.run_dir}",
        f"{'collective':<10}{'p':>3}{'size':>10}  {'chosen':<34}{'chosen/best':>12}"
        f"{'chosen/native':>14}  best",
    ]
    verdicts = []
    for (device, collective, nprocs), group in frame.groupby(["device", "collective", "nprocs"]):
        to_best, to_native = [], []
        for size, at_size in group.groupby("size_bytes"):
            at_size = without_twins(collective, at_size.drop_duplicates("algorithm", keep="last"))
            medians = dict(zip(at_size["algorithm"], at_size["median_us"], strict=True))
            query = Query(
                collective,
                int(nprocs),
                int(size),
                device,
                int(at_size["nodes"].iloc[0]),
                int(at_size["ppn"].iloc[0]),
            )
            chosen = selector.decide(query, default_context(query)).label
            # The measured twin of the choice (the same code under another chunk size).
            kept = point_representatives(collective, at_size, chosen)
            chosen = next((a for a in medians if kept[a] == kept[chosen]), chosen)
            if chosen not in medians:
                lines.append(f"{collective:<10}{nprocs:>3}{size:>10}  {chosen:<34} not measured")
                continue
            best = min(medians, key=medians.get)
            to_best.append(medians[chosen] / medians[best])
            to_native.append(medians[chosen] / medians["native"])
            lines.append(
                f"{collective:<10}{nprocs:>3}{size:>10}  {chosen:<34}"
                f"{to_best[-1]:>12.3f}{to_native[-1]:>14.3f}  {best}"
            )
        ok = max(to_best) <= 1.05 and statistics.median(to_best) <= 1.03 and max(to_native) <= 1.05
        verdicts.append(
            f"# {collective} p={nprocs} ({device}): "
            f"chosen/best median {statistics.median(to_best):.3f} "
            f"max {max(to_best):.3f}; chosen/native median {statistics.median(to_native):.3f} "
            f"max {max(to_native):.3f} -> {'meets' if ok else 'misses'} the targets "
            f"(best <= 1.05 everywhere, median <= 1.03, native <= 1.05)"
        )
    report = "\n".join(lines + verdicts)
    print(report)
    if args.out:
        Path(f"{args.out}.txt").write_text(report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
