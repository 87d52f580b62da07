"""``osu-dl-bench verify-export`` without an MPI job: its options parsed into a
VerifyExportConfig, exported files read back (selection.exports.readers), and the proof's
verdict in words. The fingerprint proof and the C client's pairing are in
test_library_tuning and test_c_client; the real launches in tests/mpi/test_library_tuning."""

import dataclasses
import itertools
import json
from collections import Counter

import pytest

from osu_dl_bench.cli import build_parser
from osu_dl_bench.commands.verify_export import proof_lines, sweep_config
from osu_dl_bench.commands.verify_export_cli import DEFAULT_CLIENT_LAUNCHES, config_from_args
from osu_dl_bench.errors import UsageError
from osu_dl_bench.selection.exports.readers import file_library, file_reader, named_algorithms
from osu_dl_bench.selection.exports.verification import Fingerprinted, Proof, arm_order


def _config(*argv):
    return config_from_args(build_parser().parse_args(["verify-export", *argv]))


def test_the_options_make_a_frozen_config_with_the_run_directory_beside_the_file(tmp_path):
    file = tmp_path / "t.mpich.json"
    file.write_text("{}")
    cfg = _config(str(file), "--np", "2", "-m", "8:1M")
    assert (cfg.file, cfg.nprocs, cfg.message_size, cfg.launches, cfg.client) == (
        str(file),
        "2",
        "8:1M",
        6,  # many short launches: a comparison across launches needs launches
        "c",
    )
    assert cfg.run_dir == str(tmp_path / "t.mpich.json.verify")
    assert _config(str(file), "-o", "elsewhere").run_dir == "elsewhere"
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.launches = 1


def test_the_c_client_s_wait_is_an_option_with_a_bound(tmp_path):
    file = tmp_path / "t.mpich.json"
    file.write_text("{}")
    assert _config(str(file)).client_timeout == 600
    assert _config(str(file), "--client-timeout", "30").client_timeout == 30
    for bad in ("0", "-1", "abc", "1e9"):
        with pytest.raises(UsageError, match="--client-timeout"):
            _config(str(file), "--client-timeout", bad)


def test_a_missing_file_is_refused_when_the_options_are_parsed(tmp_path):
    with pytest.raises(UsageError, match="none.json: no such file"):
        _config(str(tmp_path / "none.json"))


def test_the_file_kind_is_read_from_the_file(tmp_path):
    mpich = tmp_path / "t.mpich.json"
    mpich.write_text(json.dumps({"collective=allreduce": {}}))
    assert file_library(mpich) == "mpich"
    assert file_library(tmp_path / "t.openmpi.rules") == "openmpi"
    with pytest.raises(UsageError, match="give the classic .openmpi.rules file"):
        file_library(tmp_path / "t.openmpi.json")
    with pytest.raises(UsageError, match="expected an exported"):
        file_library(tmp_path / "nonexistent.json")
    other = tmp_path / "other.json"
    other.write_text("{}")
    with pytest.raises(UsageError, match="no 'collective=' keys"):
        file_library(other)
    rules = tmp_path / "bad.rules"
    rules.write_text("not a number\n")
    with pytest.raises(UsageError, match="not a classic Open MPI rules file"):
        file_reader(rules, "openmpi")


def test_the_algorithms_a_file_names_are_collected_without_the_default():
    def reader(collective, nprocs, size):
        return "ring" if size >= 1024 else ("tree" if nprocs == 4 else None)

    assert named_algorithms(reader, (2,), [8, 16]) == []
    assert named_algorithms(reader, (2, 4), [8, 1024]) == ["ring", "tree"]


def test_the_proof_says_when_nothing_could_be_told_apart():
    assert "no fingerprint recorded" in proof_lines(Proof((), (), 0), "mpich")[0]
    kept = proof_lines(Proof((), (), 3), "mpich")[0]
    assert "keeps or matches mpich's default" in kept and "(3 checked)" in kept
    seen = Proof((Fingerprinted(2, 1, 65536, "ring"),), (), 4)
    assert proof_lines(seen, "mpich") == [
        "the file took effect: 4 allreduce fingerprints match the algorithm it names, "
        "1 of them distinct from the default's"
    ]
    missed = proof_lines(Proof((), (Fingerprinted(4, 2, 8, None),), 1), "mpich")
    assert missed[1] == "  p=4 launch 2 8: expected the default's"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--launches", "0"], "argument --launches: expected a whole number >= 1, got '0'"),
        (["--launches", "101"], "argument --launches: expected at most 100, got 101"),
        (["--budget", "-1"], "argument --budget: expected seconds in (0, 3600], got '-1'"),
    ],
)
def test_launches_and_budget_out_of_the_sweeps_bounds_are_refused_in_one_line(
    tmp_path, capsys, argv, said
):
    from osu_dl_bench.cli import main

    file = tmp_path / "t.mpich.json"
    file.write_text(json.dumps({"collective=allreduce": {}}))
    assert main(["verify-export", str(file), *argv]) == 2
    err = capsys.readouterr().err
    assert said in err and "usage:" not in err and "--sbatch-args" not in err


def test_the_sweep_it_runs_keeps_a_file_name_that_starts_with_a_dash(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-e.mpich.json").write_text('{"collective=allreduce": {}}')
    args = build_parser().parse_args(["verify-export", "--", "-e.mpich.json"])
    sweep = sweep_config(config_from_args(args), str(tmp_path / "run"), ["ring"])
    assert sweep.measure.library_file == str(tmp_path / "-e.mpich.json")
    assert sweep.measure.algorithms == "native,native:alg=ring"


@pytest.mark.parametrize(
    "name, text",
    [
        ("t.mpich.json", json.dumps({"collective=allreduce": "a string"})),
        ("t.mpich.json", json.dumps({"collective=allreduce": {"comm_type=intra": [1]}})),
        (
            "t.mpich.json",
            json.dumps(
                {"collective=allreduce": {"comm_type=intra": {"comm_size<=abc": {"x": {}}}}}
            ),
        ),
        ("t.openmpi.rules", "1\n2 1\n2 99999999999999999999\n0 1 0 0\n"),
        ("t.openmpi.rules", "1\n2 abc\n"),
    ],
)
def test_a_malformed_export_is_one_message_before_anything_runs(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(UsageError, match=f"{name}: not "):
        reader = file_reader(path, file_library(path))
        named_algorithms(reader, (2, 4), [8, 64, 1024])


def test_a_selection_file_of_the_other_library_is_never_handed_to_it():
    from collectives import mpit

    with pytest.raises(UsageError, match="t.openmpi.rules is a selection file for openmpi"):
        mpit.selection_file_environment("mpich", "/x/t.openmpi.rules")
    with pytest.raises(UsageError, match="for mpich, but the jobs run openmpi"):
        mpit.selection_file_environment("openmpi", "/x/t.mpich.json")
    assert mpit.selection_file_environment("openmpi", "/x/t.openmpi.rules")


def test_a_stopped_verification_is_continued_with_the_resume_its_messages_advise(tmp_path):
    file = tmp_path / "t.mpich.json"
    file.write_text(json.dumps({"collective=allreduce": {}}))
    run = str(tmp_path / "run")
    assert not sweep_config(_config(str(file)), run, []).resume
    assert sweep_config(_config(str(file), "--resume"), run, []).resume


def test_an_mpich_export_is_named_by_its_base_or_any_one_of_its_three_files(tmp_path):
    from collectives import mpit

    for layer in ("ch4", "posix", "mpir"):
        (tmp_path / f"t.mpich.{layer}.json").write_text('{"collective=allreduce": {}}')
    mpir = str(tmp_path / "t.mpich.mpir.json")
    for given in ("t", "t.mpich.ch4.json", "t.mpich.posix.json", "t.mpich.mpir.json"):
        assert _config(str(tmp_path / given)).file == mpir
    env = mpit.selection_file_environment("mpich", mpir)
    assert env["MPIR_CVAR_CH4_COLL_SELECTION_TUNING_JSON_FILE"] == str(
        tmp_path / "t.mpich.ch4.json"
    )
    assert env["MPIR_CVAR_CH4_POSIX_COLL_SELECTION_TUNING_JSON_FILE"].endswith("t.mpich.posix.json")
    assert env["MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE"] == mpir
    assert env["MPIR_CVAR_COLLECTIVE_FALLBACK"] == "error"


def test_an_older_single_file_mpich_export_verifies_as_the_mpir_layer_alone(tmp_path):
    from collectives import mpit

    old = tmp_path / "t.mpich.json"
    old.write_text('{"collective=allreduce": {}}')
    assert _config(str(old)).file == str(old)
    env = mpit.selection_file_environment("mpich", str(old))
    assert env["MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE"] == str(old)
    assert not any("CH4" in name for name in env) and "MPIR_CVAR_COLLECTIVE_FALLBACK" not in env
    with pytest.raises(UsageError, match="no such file"):
        _config(str(tmp_path / "missing"))


def test_a_three_file_mpich_export_is_read_as_the_layered_candidate_it_runs(tmp_path):
    import json

    from collectives import mpich_layers
    from osu_dl_bench.runtime.mpich_trees import generic_trees
    from osu_dl_bench.selection.exports.readers import file_reader

    base = generic_trees().trees
    beta = mpich_layers.candidate_trees(mpich_layers.candidate("allreduce", "ch4_beta"), base)
    for name, trees in (("beta", beta), ("plain", base)):
        for layer in mpich_layers.LAYERS:
            path = tmp_path / f"{name}.mpich.{layer}.json"
            path.write_text(json.dumps(trees[layer]))
    # Beta runs MPIR on the whole communicator instead of the default's shared-memory
    # allreduce: a departure, named as the candidate the verifying sweep can force.
    read = file_reader(tmp_path / "beta.mpich.mpir.json", "mpich")
    assert read("allreduce", 2, 1 << 20) == "ch4_beta"
    assert read("bcast", 2, 1 << 20) is None
    # The generic trees as files are the default everywhere.
    plain = file_reader(tmp_path / "plain.mpich.mpir.json", "mpich")
    assert all(plain(c, 2, 8 << k) is None for c in ("allreduce", "bcast") for k in range(0, 22, 3))


def test_a_three_file_mpich_export_is_read_in_the_shape_of_the_jobs_nodes(tmp_path):
    import json

    from collectives import mpich_layers
    from collectives.shape import JobShape
    from osu_dl_bench.runtime.mpich_trees import generic_trees

    base = generic_trees().trees
    ring = mpich_layers.candidate_trees(mpich_layers.candidate("allreduce", "mpir_ring"), base)
    for layer in mpich_layers.LAYERS:
        (tmp_path / f"ring.mpich.{layer}.json").write_text(json.dumps(ring[layer]))
    path = tmp_path / "ring.mpich.mpir.json"
    # On one node MPIR is not reached: the default's code; across 2 nodes x 1 rank MPIR
    # runs the allreduce on node_roots_comm, and the ring is a departure.
    assert file_reader(path, "mpich")("allreduce", 2, 1 << 20) is None
    across = file_reader(path, "mpich", lambda p: JobShape(p, 2, 1))
    assert across("allreduce", 2, 1 << 20) == "mpir_ring"


def _balance(launches, start):
    orders = [arm_order(k, start) for k in range(1, launches + 1)]
    positions = Counter((arm, i) for order in orders for i, arm in enumerate(order))
    follows = Counter(pair for order in orders for pair in itertools.pairwise(order))
    return set(positions.values()), set(follows.values())


def test_the_c_client_s_launches_are_whole_balanced_cycles_of_its_three_arms(tmp_path):
    file = tmp_path / "t.mpich.json"
    file.write_text("{}")
    accepted = []
    for launches in range(0, 40):
        try:
            accepted.append(_config(str(file), "--client-launches", str(launches)).client_launches)
        except UsageError as refused:
            assert "--client-launches" in str(refused)
    assert accepted and DEFAULT_CLIENT_LAUNCHES in accepted
    for launches in accepted:
        for start in range(6):
            positions, follows = _balance(launches, start)
            # Each arm in each position, and right after each other arm, equally often.
            assert len(positions) == 1 and len(follows) == 1, (launches, start)
    for bad in ("-6", "abc", "1e9", "999999"):
        with pytest.raises(UsageError, match="--client-launches"):
            _config(str(file), "--client-launches", bad)


def _three_files(tmp_path, name, **texts):
    from collectives import mpich_layers
    from osu_dl_bench.runtime.mpich_trees import generic_trees

    base = generic_trees().trees
    for layer in mpich_layers.LAYERS:
        text = texts.get(layer, json.dumps(base[layer]))
        if text is not None:
            (tmp_path / f"{name}.mpich.{layer}.json").write_text(text)
    return str(tmp_path / name)


def test_half_an_mpich_export_or_a_damaged_file_of_it_is_one_message(tmp_path):
    from collectives import mpit

    # A sibling lost (or an MPIR file linked alone): never verified as something else.
    for layer in ("ch4", "posix"):
        base = _three_files(tmp_path, f"no{layer}", **{layer: None})
        with pytest.raises(UsageError, match=f"no{layer}.mpich.{layer}.json is not there"):
            _config(base)
        with pytest.raises(UsageError, match="three files"):
            mpit.selection_file_environment("mpich", base + ".mpich.mpir.json")
    broken = {
        "posix": "not json",  # no JSON
        "ch4": json.dumps({"collective=allreduce": {"composition=nonsense": {}}}),  # no such
    }
    for layer, text in broken.items():
        path = _config(_three_files(tmp_path, f"bad{layer}", **{layer: text})).path
        with pytest.raises(UsageError, match=f"bad{layer}"):
            file_reader(path, file_library(path))("allreduce", 2, 1 << 20)


def test_a_tree_mpich_s_csel_would_abort_on_is_one_message_before_any_launch(tmp_path):
    mpir = json.dumps({"collective=allreduce": {"bogus_key=7": {"algorithm=X": {}}}})
    not_object = json.dumps({"collective=allreduce": {"comm_type=intra": 3}})
    for name, text in (("unknown", mpir), ("scalar", not_object)):
        path = _config(_three_files(tmp_path, name, mpir=text)).path
        with pytest.raises(UsageError, match=f"{name}.mpich.mpir.json: .*(bogus_key|no object)"):
            file_reader(path, file_library(path))
        single = tmp_path / f"{name}.mpich.json"  # an older single file, the same
        single.write_text(text)
        with pytest.raises(UsageError, match="bogus_key|no object"):
            file_reader(single, "mpich")
    # MPICH's own trees, and an export of them, pass.
    plain = _config(_three_files(tmp_path, "plain")).path
    assert file_reader(plain, "mpich")("allreduce", 2, 8) is None
