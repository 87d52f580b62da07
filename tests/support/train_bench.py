"""train-bench's measurements as the tests build them: img/s per launch, round by round."""

from __future__ import annotations

# tuned and native (mpi group) ran side by side; ddp-gloo ran in the gloo group's launches,
# beside native@gloo.
MPI_RATES = {
    "native": [[100, 100, 100], [100, 100, 100], [100, 100, 100]],
    "tuned": [[100, 130, 200], [120, 120, 120], [140, 90, 150]],
}
GLOO_RATES = {
    "native": [[50, 60, 70], [50, 60, 70], [50, 60, 70]],
    "ddp-gloo": [[100, 100, 100], [100, 100, 100], [100, 100, 100]],
}
HOME = {"native": "mpi", "tuned": "mpi", "ddp-gloo": "gloo"}


def rows() -> list[dict]:
    """Every measurement of the rates above as a launch's rows (launch, group, round,
    config, img/s)."""
    found = []
    for group, rates in (("gloo", GLOO_RATES), ("mpi", MPI_RATES)):
        for label, launches in rates.items():
            for number, rounds in enumerate(launches, 1):
                for index, rate in enumerate(rounds):
                    row = {"launch": number, "group": group, "round": index, "config": label}
                    found.append({**row, "img_per_s": float(rate)})
    return found
