"""The MPICH export as three files, one per layer: each carries the sweep's winners of its
layer and MPICH's generic tree elsewhere; the notes say how to load them, under which
oversubscription setting they were measured, and each measured size's path proof."""

import json

import pandas as pd
from support.mpich_layers import layered_run

from collectives.mpich_layers import Call, call_path
from osu_dl_bench.runtime.mpich_trees import carried_trees
from osu_dl_bench.selection.exports import mpich
from osu_dl_bench.selection.tune import build_table

BASE = carried_trees().trees


def _exported(tmp_path, metadata=None):
    table, tune_warnings = build_table(layered_run(tmp_path / "run", metadata=metadata), "lib")
    paths, warnings = mpich.export(table, tmp_path / "lib")
    warnings = [*tune_warnings, *warnings]
    trees = {
        layer: json.loads((tmp_path / f"lib.mpich.{layer}.json").read_text())
        for layer in ("ch4", "posix", "mpir")
    }
    return table, trees, (tmp_path / "lib.mpich.notes.txt").read_text(), warnings


def test_each_layers_winner_is_in_its_own_file_and_mpich_decides_elsewhere(tmp_path):
    table, trees, _, warnings = _exported(tmp_path)
    ranges = table.header["library_tuning"]["entries"][0]["ranges"]
    # MPIR's ring runs the default's code on one node with the POSIX layer free: its
    # (fast, by construction) rows are not decided on, and tune says so.
    assert [(r["min_bytes"], r["alg"]) for r in ranges] == [
        (0, "ch4_beta"),
        (8192, "auto"),
        (65536, "posix_mpir"),
    ]
    assert [w for w in warnings if "not decided on" in w] == [
        f"allreduce p=2 {size}: native:alg=mpir_ring not decided on: same path as the "
        f"default: ch4:gamma > posix[world]:allreduce_release_gather"
        for size in ("1K", "2K", "8K", "16K", "64K", "1M")
    ]
    # The path each size takes through the three exported files is the one its winner took.
    expected = {
        1024: ("ch4:beta", "mpir[world]:reduce_scatter_allgather"),
        16384: ("ch4:gamma", "posix[world]:allreduce_release_gather"),  # ring: not reached
        65536: ("ch4:gamma", "mpir[world]:reduce_scatter_allgather"),
    }
    for size, path in expected.items():
        assert call_path(Call("allreduce", 2, 1, size), trees) == path
    # The other collectives and layers are MPICH's generic ones.
    assert trees["ch4"]["collective=bcast"] == BASE["ch4"]["collective=bcast"]
    assert trees["posix"]["collective=bcast"] == BASE["posix"]["collective=bcast"]


def test_the_notes_load_the_files_and_prove_each_sizes_path(tmp_path):
    _, _, notes, _ = _exported(tmp_path)
    assert (
        "# use: MPIR_CVAR_CH4_COLL_SELECTION_TUNING_JSON_FILE=lib.mpich.ch4.json "
        "MPIR_CVAR_CH4_POSIX_COLL_SELECTION_TUNING_JSON_FILE=lib.mpich.posix.json "
        "MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE=lib.mpich.mpir.json "
        "MPIR_CVAR_COLLECTIVE_FALLBACK=error mpiexec ..."
    ) in notes
    assert "# measured under: no oversubscription setting" in notes
    assert (
        "proof: allreduce p=2 nodes=1 64K posix_mpir: ch4:gamma > "
        "mpir[world]:reduce_scatter_allgather (default: ch4:gamma > "
        "posix[world]:allreduce_release_gather)"
    ) in notes
    assert "posix: allreduce comm_size=any [64K, inf) -> mpir: posix_mpir: 2 sizes" in notes


def test_an_oversubscribed_sweep_says_so_in_the_export(tmp_path):
    from support.tuning import METADATA

    pinned = {**METADATA, "mpich_posix_cvars": "MPIR_CVAR_ALLREDUCE_POSIX_INTRA_ALGORITHM=mpir"}
    table, trees, notes, warnings = _exported(tmp_path, pinned)
    assert table.header["library_tuning"]["mpich_posix_cvars"].endswith("=mpir")
    assert "# measured under: MPIR_CVAR_ALLREDUCE_POSIX_INTRA_ALGORITHM=mpir" in notes
    # pinned, the POSIX candidate is the default's code, and so is beta (the netmod hands
    # the call to MPIR on the whole communicator, as the pinned POSIX layer does); MPIR's
    # ring is reached
    ranges = table.header["library_tuning"]["entries"][0]["ranges"]
    assert [(r["min_bytes"], r["alg"]) for r in ranges] == [
        (0, "auto"),
        (8192, "mpir_ring"),
        (65536, "auto"),
    ]
    assert any("posix_mpir not decided on: the POSIX layer is pinned" in w for w in warnings)
    assert any("ch4_beta not decided on: the default's code" in w for w in warnings)
    call = Call("allreduce", 2, 1, 16384, oversubscribed=True)
    assert call_path(call, trees)[-1] == "mpir[world]:ring"
    assert "16K mpir_ring: ch4:gamma > mpir[world]:ring (default: ch4:gamma > " in notes


def test_the_setting_a_sweeps_launches_recorded_is_the_one_the_export_is_measured_under(
    tmp_path,
):
    # The sweep records the POSIX setting per launch (jobs.P.launches.L), not per run.
    from support.tuning import METADATA

    setting = "MPIR_CVAR_ALLREDUCE_POSIX_INTRA_ALGORITHM=mpir"
    jobs = {"2": {**METADATA["jobs"]["2"], "launches": {"1/mpi": {"mpich_posix_cvars": setting}}}}
    table, _, notes, _ = _exported(tmp_path, {**METADATA, "jobs": jobs})
    assert table.header["library_tuning"]["mpich_posix_cvars"] == setting
    assert f"# measured under: {setting}" in notes
    proofs = [line for line in notes.splitlines() if line.startswith("proof:")]
    assert proofs and not any("release_gather" in line for line in proofs)


def test_a_fingerprint_that_cannot_tell_the_exported_path_apart_says_so(tmp_path):
    # POSIX pinned, recursive doubling replaces reduce_scatter_allgather for a built-in
    # op; the fingerprint's user-defined op takes recursive doubling in both, so its
    # equal hashes prove nothing, and the proof line says why.
    from support.mpich_layers import layered_run
    from support.tuning import METADATA

    setting = "MPIR_CVAR_ALLREDUCE_POSIX_INTRA_ALGORITHM=mpir"
    same = {"16384": ["h"], "65536": ["h"]}
    launches = {
        "1/mpi": {"mpich_posix_cvars": setting, "fingerprints": same},
        "1/alg_mpir_recursive_doubling": {"fingerprints": same},
    }
    jobs = {"2": {**METADATA["jobs"]["2"], "launches": launches}}
    plan = {size: {"native:alg=mpir_recursive_doubling": 0.4} for size in (16384, 65536)}
    run = layered_run(tmp_path / "run", plan=plan, metadata={**METADATA, "jobs": jobs})
    table, _ = build_table(run, "lib")
    mpich.export(table, tmp_path / "lib")
    notes = (tmp_path / "lib.mpich.notes.txt").read_text()
    line = next(x for x in notes.splitlines() if x.startswith("proof: allreduce p=2 nodes=1 16K"))
    assert "mpir_recursive_doubling: ch4:gamma > mpir[world]:recursive_doubling" in line
    assert "fingerprint the same as the default's (its user-defined op runs the same code" in line


def test_the_candidates_the_sweep_left_unmeasured_are_listed_with_the_reason(tmp_path):
    from support.tuning import METADATA

    reason = "runs MPICH's default code at every size: same path as the default: ch4:gamma"
    skipped = [{"collective": "allreduce", "backend": "mpi", "algorithm": "native:alg=mpir_smp"}]
    jobs = {
        "2": {
            **METADATA["jobs"]["2"],
            "launches": {"1/mpi": {"skipped": [{**skipped[0], "reason": reason}]}},
        }
    }
    table, _, notes, _ = _exported(tmp_path, {**METADATA, "jobs": jobs})
    listed = f"p=2 allreduce native:alg=mpir_smp: {reason}"
    assert table.header["library_tuning"]["not_measured"] == [listed]
    assert f"# not measured: {listed}" in notes


def test_each_proof_says_whether_the_fingerprint_differs_from_the_defaults(tmp_path):
    from support.tuning import METADATA

    launches = {
        "1/mpi": {"fingerprints": {"65536": [1, 2], "1048576": [5, 6], "1024": [3, 4]}},
        "1/alg_posix_mpir": {"fingerprints": {"65536": [1, 2], "1048576": [7, 7]}},
    }
    jobs = {"2": {**METADATA["jobs"]["2"], "launches": launches}}
    _, _, notes, _ = _exported(tmp_path, {**METADATA, "jobs": jobs})
    assert "64K posix_mpir: ch4:gamma" in notes
    line = next(n for n in notes.splitlines() if "64K posix_mpir" in n)
    # a user-defined op never takes release_gather: the fingerprint's call runs MPIR's
    # recursive doubling with and without the file, and the line says it cannot tell
    assert "; fingerprint the same as the default's (its user-defined op" in line
    line = next(n for n in notes.splitlines() if "1M posix_mpir" in n)
    assert line.endswith("; fingerprint differs from the default's")
    line = next(n for n in notes.splitlines() if "1K ch4_beta" in n)
    assert "fingerprint" not in line  # not recorded for its group


def test_a_hostile_export_name_stays_a_name_in_the_use_line_and_never_a_command(tmp_path):
    import os
    import subprocess

    import pytest

    from osu_dl_bench.errors import UsageError
    from osu_dl_bench.selection import exports
    from osu_dl_bench.selection.exports import openmpi

    table, _ = build_table(layered_run(tmp_path / "run"), "lib")
    hostile = "a b $(touch INJECTED) `touch TICK` 'q\"; touch SEMI"
    mpich.export(table, tmp_path / hostile)
    notes = (tmp_path / f"{hostile}.mpich.notes.txt").read_text()
    use = next(line for line in notes.splitlines() if line.startswith("# use: "))
    # Pasted into a shell (the '...' being the user's command), it sets the three names.
    command = use.removeprefix("# use: ").replace(" mpiexec ...", " env")
    shell = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True)
    assert shell.returncode == 0, shell.stderr
    assert f"MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE={hostile}.mpich.mpir.json" in shell.stdout
    rules = openmpi.classic_text(table, [], f"{hostile}.openmpi.rules")
    use = next(line for line in rules.splitlines() if line.startswith("# use: "))
    command = use.removeprefix("# use: ").replace("mpirun", "echo").removesuffix(" ...")
    shell = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True)
    assert shell.stdout.split("filename ")[-1].strip() == f"{hostile}.openmpi.rules"
    assert not {"INJECTED", "TICK", "SEMI"} & set(os.listdir(tmp_path))
    # A newline would start a line of its own in the files' comments: refused up front.
    with pytest.raises(UsageError, match="control characters"):
        exports.export_paths(tmp_path / "a\n1 # rule", ["openmpi", "mpich"])


def _bcast_run(run_dir, plan):
    """A layered run of the candidates' rows in ``plan``, as bcast (no reduction op)."""
    run = layered_run(run_dir, plan=plan)
    frame = pd.read_csv(run / "results.csv")
    frame["collective"] = "bcast"
    frame["op"] = float("nan")
    frame.to_csv(run / "results.csv", index=False)
    return run


def test_a_bcast_composition_that_runs_the_defaults_code_is_never_exported(tmp_path):
    # At p = 2 on one node, bcast's compositions alpha, beta and delta all run the
    # default's path (ch4_coll_impl.h: delta stages GPU buffers only): a sweep that once
    # measured delta there (an older sweep did, and its export wrote it at 16K-32K) must
    # not see it decided on, however fast its rows.
    plan = {size: {"native:alg=ch4_delta": 0.5} for size in (8192, 16384, 32768)}
    run = _bcast_run(tmp_path / "run", plan)
    table, warnings = build_table(run, "lib")
    paths, _ = mpich.export(table, tmp_path / "lib")
    ch4 = json.loads((tmp_path / "lib.mpich.ch4.json").read_text())
    assert ch4["collective=bcast"] == BASE["ch4"]["collective=bcast"]
    assert sum("ch4_delta not decided on: same path as the default" in w for w in warnings) == 3
    notes = (tmp_path / "lib.mpich.notes.txt").read_text()
    assert "ch4: bcast" not in notes and "delta" not in notes.split("proof:")[0].split("# use:")[1]


def test_a_ch4_departure_splits_sizes_at_the_generic_trees_leaves(tmp_path):
    # bcast's composition gamma wins at 8M: the size split goes below MPICH's generic
    # comm conditions, which MPICH prunes once per communicator, not in front of them.
    plan = {4 << 20: {"native:alg=ch4_gamma": 1.5}, 8 << 20: {"native:alg=ch4_gamma": 0.2}}
    run = _bcast_run(tmp_path / "run", plan)
    table, _ = build_table(run, "lib")
    mpich.export(table, tmp_path / "lib")
    trees = {
        layer: json.loads((tmp_path / f"lib.mpich.{layer}.json").read_text())
        for layer in ("ch4", "posix", "mpir")
    }
    # (comm_size=any: the export's comm size bound, pruned as the comm conditions are)
    intra = trees["ch4"]["collective=bcast"]["comm_type=intra"]["comm_size=any"]
    generic = BASE["ch4"]["collective=bcast"]["comm_type=intra"]
    assert list(intra) == list(generic) == ["comm_hierarchy=parent", "comm_hierarchy=any"]
    leaf = intra["comm_hierarchy=parent"]["comm_size<8"]["avg_msg_size=any"]
    assert list(leaf) == ["avg_msg_size<=8388607", "avg_msg_size=any"]
    for size, path in ((8, call_path(Call("bcast", 2, 1, 8), BASE)), (8 << 20, None)):
        mine = call_path(Call("bcast", 2, 1, size), trees)
        assert mine == path if path else mine[0] == "ch4:gamma"
