"""verify-export's C client against the best measured choice: the candidates' own arms in a
balanced order for k arms, the rule's pick per size, and the share of its speedup the file
captures (no MPI job here)."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from support.mpich_layers import corrected_export, synthetic_latencies

from osu_dl_bench.commands.verify_export import best_lines
from osu_dl_bench.errors import UsageError
from osu_dl_bench.runtime.mpich_trees import FILE_VARIABLES, generic_trees
from osu_dl_bench.selection.exports.verification import (
    FILE_ARM,
    NULL_ARM,
    arm_order,
    best_choices,
    captured_share,
    client_arms,
    client_verdicts,
    export_sweep,
    measured_candidates,
)

BIG = (4 << 20, 8 << 20, 16 << 20)


@pytest.mark.parametrize("candidates", [0, 1, 2, 3, 4])
def test_k_arms_alternate_in_a_balanced_order_over_whole_cycles(candidates):
    arms = client_arms([f"ch4_{c}" for c in "abcd"[:candidates]])
    k = len(arms)
    cycle = k if k % 2 == 0 else 2 * k
    for seed in range(cycle):
        orders = [arm_order(launch, seed, arms) for launch in range(1, cycle + 1)]
        assert all(sorted(order) == sorted(arms) for order in orders)
        positions = Counter((i, arm) for order in orders for i, arm in enumerate(order))
        assert len(positions) == k * k and len(set(positions.values())) == 1
        follows = Counter(pair for order in orders for pair in zip(order, order[1:], strict=False))
        assert len(follows) == k * (k - 1) and len(set(follows.values())) == 1


def test_a_candidate_named_as_an_arm_is_refused():
    with pytest.raises(ValueError, match="clash"):
        client_arms(["file"])


def test_the_best_choice_per_size_and_the_share_of_its_speedup_the_file_captures():
    # ch4_beta halves the three largest sizes; the file takes it at two of them.
    factors = {
        "ch4_beta": dict.fromkeys(BIG, 0.5),
        FILE_ARM: {4 << 20: 1.0, 8 << 20: 0.5, 16 << 20: 0.5},
    }
    latencies = synthetic_latencies(factors)
    measured = {("allreduce", 2): {"ch4_beta": BIG}}
    best = best_choices(latencies, measured)
    assert [b.where[2] for b in best] == list(BIG)  # only where the sweep measured it
    assert all(b.choice == "ch4_beta" and b.confirmed for b in best)
    reader = lambda c, p, s: "ch4_beta" if s >= 8 << 20 else None  # noqa: E731
    share = captured_share(client_verdicts(latencies, reader), best, latencies)
    assert len(share.sizes) == 3
    assert math.isclose(share.share, 2 / 3, abs_tol=0.05)
    assert share.low < share.share < share.high  # from the launches resampled
    assert share.low > 0.55 and share.high < 0.8
    said = best_lines(best, client_verdicts(latencies, reader), latencies)
    line = next(ln for ln in said if ln.startswith("# c: captured share (all): "))
    assert (
        f"{100 * share.share:.1f}% (95% CI {100 * share.low:.1f}-{100 * share.high:.1f}%)" in line
    )


def _share_of(seed, launches, noise):
    """The captured share where the file takes the best choice's halving at 2 of 3 sizes
    (the truth: 2/3), from synthetic C client launches."""
    factors = {
        "ch4_beta": dict.fromkeys(BIG, 0.5),
        FILE_ARM: {4 << 20: 1.0, 8 << 20: 0.5, 16 << 20: 0.5},
    }
    latencies = synthetic_latencies(factors, launches, seed, noise=noise)
    best = best_choices(latencies, {("allreduce", 2): {"ch4_beta": BIG}})
    reader = lambda c, p, s: "ch4_beta" if s >= 8 << 20 else None  # noqa: E731
    return captured_share(client_verdicts(latencies, reader), best, latencies)


def test_the_captured_shares_interval_covers_the_truth_as_claimed():
    # 200 synthetic verifications of 12 launches, each arm 0.15 (sd of log) noisy: the
    # expanded percentile interval covers the truth 94% of the time here (6 launches: 96%,
    # 24: 95.5%); the plain percentile interval covered 88.5%.
    shares = [_share_of(seed, 12, 0.15) for seed in range(200)]
    assert all(len(s.sizes) == 3 for s in shares)
    covered = sum(s.low <= 2 / 3 <= s.high for s in shares) / len(shares)
    assert covered >= 0.92, covered


def test_without_a_confirmed_best_choice_the_share_is_undefined_not_full():
    latencies = synthetic_latencies({"posix_mpir": dict.fromkeys(BIG, 1.0)})
    best = best_choices(latencies, {("allreduce", 2): {"posix_mpir": BIG}})
    assert best and not any(b.confirmed for b in best)
    share = captured_share(client_verdicts(latencies, lambda *_: None), best, latencies)
    assert share.sizes == () and math.isnan(share.share)


def test_a_slower_candidate_is_not_the_rules_pick():
    latencies = synthetic_latencies(
        {"ch4_alpha": dict.fromkeys(BIG, 3.0), "ch4_beta": dict.fromkeys(BIG, 0.4)}
    )
    measured = {("allreduce", 2): {"ch4_alpha": BIG, "ch4_beta": BIG}}
    assert {b.choice for b in best_choices(latencies, measured)} == {"ch4_beta"}


def test_the_sweeps_measured_candidates_are_read_with_their_sizes():
    rows = [
        ("allreduce", "native", "mpi", 8),
        ("allreduce", "native:alg=ch4_beta", "alg_ch4_beta", 4 << 20),
        ("allreduce", "native:alg=ch4_beta", "alg_ch4_beta", 8 << 20),
        ("bcast", "native:alg=posix_mpir", "alg_posix_mpir", 16 << 20),
        ("bcast", "native:null_apart", "null", 8),
    ]
    frame = pd.DataFrame(
        [
            {
                "collective": c,
                "backend": "mpi",
                "algorithm": a,
                "group": g,
                "size_bytes": s,
                "nprocs": 2,
                "nodes": 1,
                "ppn": 2,
                "count": s // 4,
                "launch": 1,
                "dtype": "float32",
                "op": "sum",
                "device": "cpu",
                "validation": "pass",
            }
            for c, a, g, s in rows
        ]
    )
    assert measured_candidates(frame) == {
        ("allreduce", 2): {"ch4_beta": (4 << 20, 8 << 20)},
        ("bcast", 2): {"posix_mpir": (16 << 20,)},
    }


def test_the_sweep_of_an_export_is_found_through_its_tables_provenance(tmp_path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (tmp_path / "table.json").write_text(json.dumps({"provenance": {"run_dir": str(sweep)}}))
    assert export_sweep(tmp_path / "table.mpich.mpir.json") == sweep
    assert export_sweep(tmp_path / "other.mpich.mpir.json") is None
    sweep.rmdir()
    assert export_sweep(tmp_path / "table.mpich.mpir.json") is None


def test_the_client_runs_each_candidate_through_its_files_at_its_sizes_in_whole_cycles(
    tmp_path, monkeypatch
):
    from osu_dl_bench.cli import build_parser
    from osu_dl_bench.commands import verify_export
    from osu_dl_bench.commands.verify_export import sweep_config
    from osu_dl_bench.commands.verify_export_cli import config_from_args

    file = tmp_path / "t.mpich.json"
    file.write_text(json.dumps(generic_trees().trees["mpir"]))
    argv = ["verify-export", str(file), "--np", "2", "-m", "8:1M", "-o", str(tmp_path / "run")]
    argv += ["--collectives", "allreduce"]
    cfg = config_from_args(build_parser().parse_args(argv))
    runs = []

    def client(run, env, mpi):
        runs.append((run, dict(env)))
        return {run.lo: 10.0, run.hi: 20.0}

    monkeypatch.setattr(verify_export, "run_client", client)
    sweep = sweep_config(cfg, cfg.run_dir, [])
    measured = {("allreduce", 2): {"ch4_beta": (64 << 10, 1 << 20), "posix_mpir": (1 << 20,)}}
    latencies = verify_export.measure_client(
        cfg, "mpich", sweep, {"allreduce": Path("c")}, measured
    )
    # 5 arms: a whole cycle of their Williams design is 10 launches; 12 asked -> 20.
    assert len(runs) == 20 * 5
    beta = [(run, env) for run, env in runs if "ch4_beta" in run.what]
    assert len(beta) == 20 and {(r.lo, r.hi) for r, _ in beta} == {(64 << 10, 1 << 20)}
    ch4 = json.loads(Path(beta[0][1][FILE_VARIABLES["ch4"]]).read_text())
    assert ch4 != generic_trees().tree("ch4")  # its one change, loaded from its files
    assert beta[0][1]["MPIR_CVAR_COLLECTIVE_FALLBACK"] == "error"
    plain = [run for run, _ in runs if run.what.endswith("without it")]
    assert {(r.lo, r.hi) for r in plain} == {(8, 1 << 20)}
    assert set(latencies[("allreduce", 2, 1 << 20, "posix_mpir")]) == set(range(1, 21))
    assert NULL_ARM in {k[3] for k in latencies}


def test_the_corrected_export_keeps_only_departures_the_c_client_confirms(tmp_path):
    from collectives.mpich_layers import Call, call_path
    from osu_dl_bench.selection.exports.verification import KEPT_CONFIRMED, TAKEN_BEST

    found, fixed = corrected_export(tmp_path)
    refused = {v.where[2] for v in found if v.refused}
    # (8 and 64 bytes: the beta departure without the gain it has from 1K)
    assert refused == {8, 64, 64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20}
    chosen = {c.where[2]: (c.alg, c.why) for c in fixed}
    assert chosen[2048] == ("ch4_beta", KEPT_CONFIRMED)
    assert chosen[1 << 20] == ("posix_mpir", TAKEN_BEST)
    assert chosen[8][0] == chosen[128 << 10][0] == chosen[16 << 10][0] == "auto"
    trees = {
        layer: json.loads((tmp_path / f"fixed.mpich.{layer}.json").read_text())
        for layer in ("ch4", "posix", "mpir")
    }
    generic = {layer: generic_trees().tree(layer) for layer in ("ch4", "posix", "mpir")}
    for size, departs in (
        (8, False),
        (2048, True),
        (16 << 10, False),
        (128 << 10, False),
        (1 << 20, True),
    ):
        call = Call("allreduce", 2, 1, size, itemsize=4)
        assert (call_path(call, trees) != call_path(call, generic)) == departs, size
    notes = (tmp_path / "fixed.mpich.notes.txt").read_text()
    assert "posix: allreduce comm_size=any [1M, inf) -> mpir: posix_mpir: 1 sizes" in notes


def test_write_corrected_writes_the_export_its_table_and_the_c_clients_evidence(tmp_path):
    from support.mpich_layers import layered_run

    from osu_dl_bench.cli import build_parser
    from osu_dl_bench.commands import verify_export
    from osu_dl_bench.commands.verify_export_cli import config_from_args
    from osu_dl_bench.selection.exports import mpich
    from osu_dl_bench.selection.tune import build_table

    table, _ = build_table(layered_run(tmp_path / "run"), "lib")
    table.write(tmp_path / "lib.json")
    mpich.export(table, tmp_path / "lib")
    sizes = [1024 << k for k in range(11)]
    latencies = synthetic_latencies({FILE_ARM: {s: 0.5 if s < 8192 else 1.0 for s in sizes}})
    from osu_dl_bench.selection.exports.readers import file_reader

    found = client_verdicts(latencies, file_reader(tmp_path / "lib.mpich.mpir.json", "mpich"))
    argv = ["verify-export", str(tmp_path / "lib"), "--write-corrected", str(tmp_path / "ok")]
    cfg = config_from_args(build_parser().parse_args(argv))
    lines = verify_export.write_corrected(cfg, found, [])
    assert lines[0].startswith(f"# wrote the corrected export {tmp_path / 'ok'}: 3 departures")
    assert json.loads((tmp_path / "ok.json").read_text())["library_tuning"]["library"] == "mpich"
    notes = (tmp_path / "ok.mpich.notes.txt").read_text()
    assert "c client: allreduce p=2 2K: ch4_beta (the file's departure, confirmed" in notes
    assert "c client: allreduce p=2 64K: MPICH default (no departure confirmed" in notes
    # No table beside the export: nothing to write it again from, said before any job.
    (tmp_path / "lib.json").unlink()
    with pytest.raises(UsageError, match="BASE.json"):
        verify_export.write_corrected(cfg, found, [])


def test_the_candidates_run_are_the_sweeps_within_the_runs_sizes(tmp_path):
    from support.mpich_layers import layered_run

    from osu_dl_bench.cli import build_parser
    from osu_dl_bench.commands import verify_export
    from osu_dl_bench.commands.verify_export import sweep_config
    from osu_dl_bench.commands.verify_export_cli import config_from_args

    run = layered_run(tmp_path / "run")  # ch4_beta, mpir_ring, posix_mpir at 1K-1M
    file = tmp_path / "t.mpich.json"
    file.write_text(json.dumps(generic_trees().trees["mpir"]))
    argv = ["verify-export", str(file), "--np", "2", "-m", "4K:64K", "--sweep", str(run)]
    cfg = config_from_args(build_parser().parse_args([*argv, "--collectives", "allreduce"]))
    measured = verify_export.candidates_to_run(cfg, "mpich", sweep_config(cfg, cfg.run_dir, []))
    # -m 4K:64K: only the sweep's sizes 8K, 16K and 64K; mpir_ring, which the sweep
    # measured, runs the default's code on one node at p = 2: neither run nor judged.
    assert set(measured) == {("allreduce", 2)}
    assert set(measured[("allreduce", 2)]) == {"ch4_beta", "posix_mpir"}
    assert {s for sizes in measured[("allreduce", 2)].values() for s in sizes} == {
        8192,
        16384,
        65536,
    }
    cfg = config_from_args(build_parser().parse_args([*argv[:-2], "--best-of-candidates"]))
    with pytest.raises(UsageError, match="no sweep found"):
        verify_export.candidates_to_run(cfg, "mpich", sweep_config(cfg, cfg.run_dir, []))


def test_a_candidate_is_not_judged_where_it_runs_the_defaults_code_in_the_jobs_shape():
    from collectives.shape import JobShape
    from osu_dl_bench.selection.exports.verification import own_code_only

    # 2 nodes x 1 rank: the default allreduces 8 B by MPIR's recursive doubling on the
    # node roots (all the ranks), so the candidate runs the default's code there alone.
    two_nodes = lambda nprocs: JobShape(nprocs, 2, 1)  # noqa: E731
    measured = {("allreduce", 2): {"mpir_recursive_doubling": (8, 1 << 20)}}
    kept, lines = own_code_only(measured, two_nodes)
    assert kept == {("allreduce", 2): {"mpir_recursive_doubling": (1 << 20,)}}
    assert len(lines) == 1 and "mpir_recursive_doubling not judged at 8:" in lines[0]
    assert "runs the default's code there (2 node(s), 1 rank(s) per node)" in lines[0]
    # Its C client arm (a gain at 8 B that is the default's own code) is no best choice.
    latencies = synthetic_latencies({"mpir_recursive_doubling": {8: 0.4, 1 << 20: 0.4}})
    assert [b.where for b in best_choices(latencies, kept)] == [("allreduce", 2, 1 << 20)]
    # On one node MPICH's default never reaches MPIR (release_gather): nowhere its own code.
    kept, lines = own_code_only(measured, lambda nprocs: JobShape(nprocs, 1, nprocs))
    assert kept == {} and "release_gather" in lines[0]


def test_the_corrected_export_corrects_the_entries_of_the_shape_the_c_client_ran(tmp_path):
    from support.mpich_layers import layered_run, on_nodes

    from collectives.shape import JobShape
    from osu_dl_bench.cli import build_parser
    from osu_dl_bench.commands import verify_export
    from osu_dl_bench.commands.verify_export_cli import config_from_args
    from osu_dl_bench.selection.exports import mpich
    from osu_dl_bench.selection.exports.readers import file_reader
    from osu_dl_bench.selection.table import load_table
    from osu_dl_bench.selection.tune import build_table

    two_nodes = lambda nprocs: JobShape(nprocs, 2, 1)  # noqa: E731
    table, _ = build_table(layered_run(tmp_path / "run"), "lib")
    table = on_nodes(table, 2)  # as measured at 2 nodes x 1 rank
    table.write(tmp_path / "lib.json")
    mpich.export(table, tmp_path / "lib")
    sizes = [1024 << k for k in range(11)]
    latencies = synthetic_latencies({FILE_ARM: dict.fromkeys(sizes, 1.0)})
    reader = file_reader(tmp_path / "lib.mpich.mpir.json", "mpich", two_nodes)
    found = client_verdicts(latencies, reader)
    argv = ["verify-export", str(tmp_path / "lib"), "--write-corrected", str(tmp_path / "ok")]
    cfg = config_from_args(build_parser().parse_args(argv))
    lines = verify_export.write_corrected(cfg, found, [], two_nodes)
    assert lines[0].startswith(f"# wrote the corrected export {tmp_path / 'ok'}: 0 departures")
    (entry,) = load_table(tmp_path / "ok.json").header["library_tuning"]["entries"]
    assert entry["nodes"] == 2 and [r["alg"] for r in entry["ranges"]] == ["auto"]
    assert {p["evidence"] for r in entry["ranges"] for p in r["points"]} == {"c client"}
    # A one-node entry beside it is kept as exported, and the notes say why.
    both = replace_entries(table, on_nodes(table, 1), on_nodes(table, 2))
    both.write(tmp_path / "lib.json")
    verify_export.write_corrected(cfg, found, [], two_nodes)
    one, two = load_table(tmp_path / "ok.json").header["library_tuning"]["entries"]
    assert one["ranges"] == both.header["library_tuning"]["entries"][0]["ranges"]
    assert [r["alg"] for r in two["ranges"]] == ["auto"]
    notes = (tmp_path / "ok.mpich.notes.txt").read_text()
    assert (
        "# kept as exported, not corrected: allreduce p=2 on 1 node(s), cpu "
        "(the C client ran p=2 on 2 node(s))" in notes
    )


def replace_entries(table, *tables):
    """``table`` with the library entries of ``tables``, in turn."""
    from dataclasses import replace

    entries = [e for t in tables for e in t.header["library_tuning"]["entries"]]
    tuning = {**table.header["library_tuning"], "entries": entries}
    return replace(table, header={**table.header, "library_tuning": tuning})


def test_the_corrected_two_node_export_runs_the_confirmed_ring_across_two_nodes(tmp_path):
    from support.mpich_layers import corrected_two_nodes, layered_run

    from collectives.mpich_layers import Call, call_path
    from osu_dl_bench.selection.tune import build_table

    table, _ = build_table(layered_run(tmp_path / "run"), "lib")
    corrected_two_nodes(table, tmp_path / "fixed")
    trees = {
        layer: json.loads((tmp_path / f"fixed.mpich.{layer}.json").read_text())
        for layer in ("ch4", "posix", "mpir")
    }
    for size, ring in ((8, False), (8192, False), (64 << 10, True), (1 << 20, True)):
        path = call_path(Call("allreduce", 2, 2, size, itemsize=4), trees)
        assert (path[-1] == "mpir[node_roots]:ring") == ring, size


def test_the_client_report_script_reads_whole_cycles_where_every_arm_ran(tmp_path, capsys):
    from support.scripts import load_script

    report = load_script("client_report")
    # Two candidates: 5 arms, a Williams cycle of 10 launches; 23 launches kept -> 20.
    latencies = synthetic_latencies(
        {"ch4_alpha": dict.fromkeys(BIG, 1.0), "ch4_beta": dict.fromkeys(BIG, 0.5)}, launches=23
    )
    kept = report.whole_cycles(latencies)
    assert [sorted(per) for per in kept.values()] == [list(range(1, 21))] * len(latencies)
    # Stopped in launch 20, before the file's arm at 16M ran: the first cycle only, for
    # every arm of the collective.
    del latencies[("allreduce", 2, 16 << 20, FILE_ARM)][20]
    kept = report.whole_cycles(latencies)
    assert [sorted(per) for per in kept.values()] == [list(range(1, 11))] * len(latencies)


@pytest.mark.parametrize(
    "text",
    ["{", '{"a": 1}', "[]", '[{"collective": "allreduce"}]', '[{"nprocs": "x"}]', "[1]"],
)
def test_the_client_report_script_says_which_file_it_cannot_read(tmp_path, capsys, text):
    from support.scripts import load_script

    (tmp_path / "c_client_latencies.json").write_text(text)
    argv = [str(tmp_path), str(tmp_path / "x.mpich.json"), str(tmp_path)]
    assert load_script("client_report").main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"client_report: {tmp_path / 'c_client_latencies.json'}: "), err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_the_client_report_script_refuses_a_folder_that_is_no_sweep(tmp_path, capsys):
    from support.scripts import load_script

    record = {"collective": "allreduce", "nprocs": 2, "size_bytes": 8, "arm": "file"}
    record |= {"launch": 1, "us": 2.0}
    (tmp_path / "c_client_latencies.json").write_text(json.dumps([record]))
    argv = [str(tmp_path), str(tmp_path / "x.mpich.json"), str(tmp_path / "none")]
    assert load_script("client_report").main(argv) == 2
    assert "no results.csv: not a sweep's run directory" in capsys.readouterr().err
