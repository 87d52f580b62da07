"""The cluster figures of training: from a train-bench run (OUT.json) and a `train --adapt
--json` record of the same workload on the same cluster (its --json record and its output), print
  - each configuration's img/s against native, with its 95% interval (paired rounds);
  - tuned's captured share of the best fixed configuration's gain over native;
  - tuned against DDP-Gloo, tuned/adapted against tuned and native;
  - the step's communication share (native without overlap: busy time over step time);
  - the step's communication predicted from the table against the one measured in
    training (the check's own step line).

    python scripts/training_cluster_summary.py BENCH.json CHECK.json CHECK.txt
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from osu_dl_bench.selection.paired import paired_ratio
from osu_dl_bench.train.bench_report import series_by_config

FIXED = ("ring", "hierarchical", "rabenseifner", "recursive_doubling", "tree")


def _cell(found) -> str:
    return f"{found.ratio:.3f}x [95% CI {found.low:.3f}-{found.high:.3f}]"


def _paired(series, a: str, b: str):
    """a's img/s over b's, paired by round within each launch (None if either is absent)."""
    mine = next((s for (label, _), s in series.items() if label == a), None)
    base = next((s for (label, _), s in series.items() if label == b), None)
    if mine is None or base is None:
        return None
    return paired_ratio(mine, base, "training-cluster", a, b)


def bench_lines(data: dict) -> list[str]:
    """The img/s figures of one train-bench run."""
    summary, series = data["summary"], series_by_config(data["rows"])
    lines = ["# img/s (median over every round of every launch), each / native [95% CI]:"]
    for key, row in sorted(summary.items(), key=lambda kv: -kv[1]["median_img_per_s"]):
        vs = row.get("vs_native")
        cell = f"{vs['ratio']:.3f}x [{vs['low']:.3f}-{vs['high']:.3f}]" if vs else "-"
        lines.append(f"  {key:28s} {row['median_img_per_s']:8.1f} img/s   {cell}")
    fixed = {k: v for k, v in summary.items() if k.split(":")[0] in FIXED and v.get("vs_native")}
    tuned = summary.get("tuned", {}).get("vs_native")
    if fixed and tuned:
        best, row = max(fixed.items(), key=lambda kv: kv[1]["vs_native"]["ratio"])
        gain = row["vs_native"]["ratio"] - 1
        lines.append(
            f"# best fixed configuration: {best}, {row['vs_native']['ratio']:.3f}x native; "
            f"tuned {tuned['ratio']:.3f}x [{tuned['low']:.3f}-{tuned['high']:.3f}]"
        )
        if gain > 0:
            share = [(x - 1) / gain for x in (tuned["ratio"], tuned["low"], tuned["high"])]
            lines.append(
                f"# tuned captures {share[0]:.0%} of that gain (tuned's interval over the "
                f"best's point estimate: {share[1]:.0%} to {share[2]:.0%})"
            )
        else:
            lines.append("# no fixed configuration was faster than native: no gain to capture")
    for a, b in (("tuned", "ddp-gloo"), ("tuned/adapted", "tuned"), ("tuned/adapted", "native")):
        found = _paired(series, a, b)
        if found is not None:
            lines.append(f"# {a} / {b}: {_cell(found)} over {found.launches} launches")
    serial = summary.get("native/no-overlap", {})
    if serial.get("busy_ms"):
        step_ms = 1e3 * data["config"]["batch_size"] / serial["median_img_per_s"]
        share = serial["busy_ms"] / step_ms
        lines.append(
            f"# communication share of a step (native, no overlap): {serial['busy_ms']:.1f} ms "
            f"of {step_ms:.1f} ms = {share:.0%}"
        )
    return lines


def check_lines(record: dict, printed: str) -> list[str]:
    """The check's report as train printed it, and its step line: the communication
    predicted from the table against the one measured in training."""
    lines = [
        line
        for line in printed.splitlines()
        if line.startswith(("# table check", "## ", "#   ", "# step:", "# cost:", "# --adapt"))
    ]
    check = record.get("check") or {}
    step = check.get("step") or {}
    predicted, measured = step.get("predicted_comm_ms"), step.get("measured_comm_ms")
    if predicted and measured:
        accuracy = 1 - abs(predicted - measured) / measured
        lines.append(
            f"# step communication predicted from the table {predicted:.2f} ms, measured in "
            f"training {measured:.2f} ms: ratio {predicted / measured:.2f}, accuracy "
            f"{accuracy:.0%} (1 - |predicted - measured| / measured)"
        )
    native = _summed(check, lambda size: "native")
    chosen = _summed(check, lambda size: size["table_choice"])
    step_ms = (record.get("communication") or {}).get("step_ms")
    if native and chosen and step_ms:
        lines.append(
            f"# the bound: the table's choices saved {native - chosen:.1f} ms of native's "
            f"{native:.1f} ms per step in the check, {(native - chosen) / step_ms:.1%} of a "
            f"{step_ms:.0f} ms step: the most img/s they can gain, if none of it was hidden"
        )
    return lines


def _summed(check: dict, label_of) -> float | None:
    """One candidate's median calls in the check, summed over its buckets (ms per step)."""
    total = 0.0
    for size in check.get("sizes", []):
        found = [c for c in size["candidates"] if c["label"] == label_of(size)]
        if not found:
            return None
        total += found[0]["measured_us"] * len(size["buckets"]) / 1e3
    return total


def main(argv: list[str]) -> int:
    """Print the figures of BENCH.json, CHECK.json and CHECK.txt (train's output)."""
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    bench, check = (json.loads(Path(p).read_text()) for p in argv[:2])
    print("\n".join(bench_lines(bench) + check_lines(check, Path(argv[2]).read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
