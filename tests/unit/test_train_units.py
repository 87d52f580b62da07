"""The trainer's parts in one process: bucket planning, sampler, gradient hooks, reducer
ordering, records, options and checkpoint files. Multi-rank runs: test_train_mpi.py."""

import argparse
import importlib.util
import os
import pickle
import re
import threading
import warnings
from dataclasses import replace

import numpy as np
import pytest

from osu_dl_bench.commands.train_cli import add_arguments, config_from_args
from osu_dl_bench.errors import UsageError
from osu_dl_bench.train.config import MODELS

needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="torch is not installed (pip install 'osu-dl-bench[train]')",
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser


def _args(*argv: str):
    return _parser().parse_args(list(argv))


# --- options ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--model", "resnet", "--depth", "12"], "expected 10, 18, 26"),
        (["--resume"], "need --checkpoint-dir"),
        (["--epochs", "0"], "--epochs: expected an integer in 1..10000: got 0"),
        (["--lr", "-1"], r"--lr: expected a finite number in \(0, 1000\]: got -1"),
        (["--lr", "nan"], r"--lr: expected a finite number in \(0, 1000\]: got nan"),
        (["--lr", "1e308"], r"--lr: expected .*\(0, 1000\]: got 1e\+308"),
        (["--momentum", "nan"], r"--momentum: expected a finite number in \[0, 1\)"),
        (["--momentum", "5"], r"--momentum: expected a finite number in \[0, 1\): got 5"),
        (["--momentum", "1"], r"--momentum: expected .*\[0, 1\): got 1"),
        (["--weight-decay", "inf"], r"--weight-decay: expected a finite number in \[0, 1\]"),
        (["--weight-decay", "2"], r"--weight-decay: expected .*\[0, 1\]: got 2"),
        (["--seed", "-1"], "--seed: expected an integer in 0..4294967295: got -1"),
        (["--seed", "99999999999999999999999"], "--seed: expected an integer in 0..4294967295"),
        (["--model", "resnet", "--image-size", "99999999"], "--image-size: .* 8..1024: got"),
        (["--image-size", "4"], "--image-size: expected an integer in 8..1024: got 4"),
        (["--model", "resnet", "--depth", "99999994"], "--depth: .* 10..202: got 99999994"),
        (["--width", "99999"], "--width: expected an integer in 1..1024"),
        (["--num-classes", "0"], "--num-classes: expected an integer in 1..100000: got 0"),
        (["--synthetic-batches", "10000000"], "--synthetic-batches: .* 1..100000"),
        (["-b", "99999999"], "--batch-size: expected an integer in 1..65536"),
        (["--epochs", "99999999"], "--epochs: expected an integer in 1..10000"),
        (["--steps", "0"], "--steps: expected an integer in 1..10000000: got 0"),
        (["--model", "resnet", "-b", "65536", "--image-size", "1024"], "GiB: expected at most"),
        (["--table", "MISSING/t.json"], "no such file"),
        (["--bucket-cap", "lots"], "bad size"),
    ],
)
def test_bad_options_are_usage_errors(argv, message, tmp_path):
    # MISSING: a folder that does not exist on any machine (a fixed path like /nonexistent
    # does exist on some: the home directory of the nobody account).
    argv = [a.replace("MISSING", str(tmp_path / "missing")) for a in argv]
    with pytest.raises(UsageError, match=message):
        config_from_args(_args(*argv))


def test_help_states_the_bounds():
    text = _parser().format_help()
    for bound in ("8..1024", "1..65536", "(0, 1000]", "[0, 1)", "0..2**32-1", "202"):
        assert bound in text, bound


@pytest.mark.parametrize(
    "option,path,message",
    [
        ("--json", "/proc/x.json", "--json /proc/x.json: cannot create files in /proc"),
        ("--save-params", "MISSING/p.pt", "--save-params .*: directory .* does not exist"),
        ("--json", "TMP", "--json .*: is a directory"),
    ],
)
def test_unwritable_outputs_are_refused_before_training(option, path, message, tmp_path):
    from osu_dl_bench.train.config import check_output_paths

    path = path.replace("MISSING", str(tmp_path / "missing")).replace("TMP", str(tmp_path))
    cfg = config_from_args(_args(option, path))
    with pytest.raises(UsageError, match=message):
        check_output_paths(cfg, rank=0)
    check_output_paths(cfg, rank=1)  # only rank 0 writes them


def test_checkpoint_dir_must_be_creatable_and_writable(tmp_path):
    from osu_dl_bench.train.config import check_output_paths

    cfg = config_from_args(_args("--checkpoint-dir", "/proc/ck", "--checkpoint-every", "2"))
    with pytest.raises(UsageError, match="--checkpoint-dir /proc/ck: cannot create it"):
        check_output_paths(cfg, rank=1)
    made = tmp_path / "a" / "b"
    cfg = config_from_args(_args("--checkpoint-dir", str(made), "--checkpoint-every", "2"))
    check_output_paths(cfg, rank=1)
    assert made.is_dir() and not list(made.iterdir())


def test_data_defaults_follow_the_model_and_any_p_splits_the_batch():
    assert config_from_args(_args("--model", "resnet")).data == "synthetic"
    cfg = config_from_args(_args("-b", "60"))
    assert cfg.data == "digits" and [cfg.local_batch(p) for p in (1, 2, 3)] == [60, 30, 20]
    assert [cfg.local_batch(7, r) for r in range(7)] == [9, 9, 9, 9, 8, 8, 8]
    with pytest.raises(UsageError, match="smaller than the 61 ranks"):
        cfg.local_batch(61)


@pytest.mark.parametrize("batch, nprocs", [(64, 3), (64, 5), (64, 6), (7, 7), (60, 4)])
def test_batch_shares_tile_the_batch_and_weights_make_the_global_mean(batch, nprocs):
    from osu_dl_bench.train.comm_hooks import share_divisor
    from osu_dl_bench.train.config import batch_share

    bounds = [batch_share(batch, nprocs, r) for r in range(nprocs)]
    assert bounds[0][0] == 0 and bounds[-1][1] == batch
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
    assert max(hi - lo for lo, hi in bounds) - min(hi - lo for lo, hi in bounds) <= 1
    # Each rank's mean over its share, divided by its divisor and summed: the global mean.
    rng = np.random.default_rng(0)
    per_sample = rng.normal(size=batch)
    summed = sum(per_sample[lo:hi].mean() / share_divisor(batch, hi - lo) for lo, hi in bounds)
    assert np.isclose(summed, per_sample.mean())
    if batch % nprocs == 0:  # equal shares: exactly DDP's division by p
        assert {share_divisor(batch, hi - lo) for lo, hi in bounds} == {float(nprocs)}


# --- bucket planning (DDP's compute_bucket_assignment_by_size) ------------------------------


def test_buckets_fill_in_reverse_order_with_a_small_first_bucket():
    sizes = [(400, "f32")] * 10  # 10 tensors of 400 B
    buckets = plan_buckets_of(sizes, cap=1000, first_cap=500)
    assert buckets == [[9, 8], [7, 6, 5], [4, 3, 2], [1, 0]]
    assert sorted(i for b in buckets for i in b) == list(range(10))


def test_oversized_tensor_gets_its_own_bucket_and_dtypes_never_mix():
    sizes = [(100, "f32"), (5000, "f32"), (8, "i64"), (100, "f32")]
    buckets = plan_buckets_of(sizes, cap=1000, first_cap=150)
    assert buckets == [[3, 1], [2], [0]]
    for bucket in buckets:
        assert len({sizes[i][1] for i in bucket}) == 1


def plan_buckets_of(sizes, cap, first_cap):
    pytest.importorskip("torch")
    from osu_dl_bench.train.buckets import plan_buckets

    return plan_buckets(sizes, cap, first_cap)


# --- sampler --------------------------------------------------------------------------------


@needs_torch
@pytest.mark.parametrize("nprocs", [1, 2, 3, 5, 7])
def test_rank_shards_make_up_the_global_batch(nprocs):
    from osu_dl_bench.train.data import ShardedSampler

    batch = 60
    samplers = [ShardedSampler(1000, batch, nprocs, r, seed=3) for r in range(nprocs)]
    assert samplers[0].steps_per_epoch == 16  # 1000 // 60, the partial batch dropped
    for step in (0, 15, 16, 40):
        whole = samplers[0].global_indices(step)
        parts = np.concatenate([s.local_indices(step) for s in samplers])
        assert np.array_equal(parts, whole) and len(set(whole)) == batch
    epoch0 = np.concatenate([samplers[0].global_indices(s) for s in range(16)])
    assert len(set(epoch0)) == 960  # no sample twice within an epoch
    assert not np.array_equal(samplers[0].global_indices(0), samplers[0].global_indices(16))


# --- gradient hooks -------------------------------------------------------------------------


def _fake_sum_allreduce(ranks: list[np.ndarray]):
    """An in-place 'allreduce' over simulated ranks: adds the others' buffers."""

    def call(send, recv, op, root):
        assert send is None and op.name == "sum"
        recv += sum(r.astype(recv.dtype) for r in ranks)

    return call


def test_mean_allreduce_divides_first_and_fp16_wraps_it():
    from osu_dl_bench.train.comm_hooks import fp16_compress, mean_allreduce

    others = [np.full(5, 3.0, np.float32) / 2]  # the other rank's buffer, already divided
    grad = np.full(5, 1.0, np.float32)
    mean_allreduce(_fake_sum_allreduce(others), 2)(grad)
    assert np.allclose(grad, 2.0)  # (1 + 3) / 2
    scratch = np.empty(5, np.float16)
    big = np.full(5, 60000.0, np.float32)  # fp16 max is 65504: summing first would overflow
    halves = [np.full(5, 30000.0, np.float16)]
    fp16_compress(mean_allreduce(_fake_sum_allreduce(halves), 2), scratch)(big)
    assert big.dtype == np.float32 and np.allclose(big, 60000.0)


@needs_torch
def test_reducer_launches_buckets_in_order_and_accounts_for_waiting():
    import torch

    from osu_dl_bench.train.buckets import flatten_state, make_buckets
    from osu_dl_bench.train.comm_thread import CommThread
    from osu_dl_bench.train.reducer import GradientReducer

    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    flatten_state([*model.parameters(), *model.buffers()])
    buckets = make_buckets(list(model.parameters()), cap=100, first_cap=50)
    assert len(buckets) >= 2
    order, threads = [], set()

    def reduce_of(index):
        def reduce(array):
            order.append(index)
            threads.add(threading.current_thread().name)
            array *= 0.5  # what averaging over 2 ranks with equal gradients does

        return reduce

    for overlap in (True, False):
        order.clear()
        with CommThread() as thread:
            reducer = GradientReducer(
                buckets, [reduce_of(b.index) for b in buckets], thread, overlap
            )
            reducer.start_step()
            model(torch.ones(3, 8)).sum().backward()
            launched_during_backward = len(reducer._futures)
            comm = reducer.finish_step()
            reducer.remove_hooks()
        assert order == list(range(len(buckets)))
        assert launched_during_backward == (len(buckets) if overlap else 0)
        assert comm.busy >= 0 and comm.exposed >= 0
        # Gradients land in the flat buffers (the .grad views), halved by the reduce.
        expected = torch.autograd.grad(model(torch.ones(3, 8)).sum(), list(model.parameters()))
        for param, grad in zip(model.parameters(), expected, strict=True):
            assert torch.allclose(param.grad, grad * 0.5)
    assert all(name.startswith("osu-dl-bench-comm") for name in threads)


@needs_torch
def test_flatten_state_keeps_values_and_makes_views():
    import torch

    from osu_dl_bench.train.buckets import flatten_state

    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    flats = flatten_state([*model.parameters(), *model.buffers()])
    assert [f.dtype for f in flats] == [torch.float32, torch.int64]
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key])
    flats[0].fill_(7.0)
    assert all(bool((p == 7.0).all()) for p in model.parameters())


# --- records --------------------------------------------------------------------------------


def test_throughput_is_horovods_mean_and_196_std():
    from osu_dl_bench.train.records import comm_record, iteration_rates, throughput

    seconds = np.array([9.0, 9.0, 0.5, 0.5, 1.0, 1.0, 0.25])  # 2 warm-up, 2 iterations of 2
    rates = iteration_rates(seconds, local_batch=10, warmup=2, per_iter=2)
    assert np.allclose(rates, [20.0, 10.0])  # the trailing partial iteration is dropped
    result = throughput(np.stack([rates, rates * 2]), per_iter=2, local_batch=10)
    assert result.per_rank_mean == pytest.approx(22.5)
    assert result.per_rank_ci == pytest.approx(1.96 * np.std([20, 10, 40, 20]))
    assert result.total_mean == pytest.approx(45.0) and result.iterations == 2
    assert throughput(np.empty((2, 0)), 2, 10) is None
    record = comm_record(np.array([4.0, 1.0, 10.0, 8.0]), nprocs=2, bcast_seconds=0.002)
    assert record.busy_ms == pytest.approx(500.0) and record.hidden_fraction == pytest.approx(0.75)


# --- checkpoints ----------------------------------------------------------------------------


@needs_torch
def test_checkpoint_round_trip_restores_state_and_rng(tmp_path):
    import torch

    from osu_dl_bench.train import checkpoint as ckpt

    model = torch.nn.Linear(3, 2)
    meta = ckpt.CheckpointMeta(step=8, nprocs=1, global_batch=4, model="cnn", data="digits")
    torch.manual_seed(5)
    path = ckpt.save_checkpoint(
        tmp_path, meta, 0, lambda: {"model": model.state_dict()}, lambda: None, keep=1
    )
    expected = torch.rand(3)
    torch.manual_seed(99)
    assert ckpt.latest_checkpoint(tmp_path) == path and path.name == "step-00000008"
    step, state = ckpt.load_checkpoint(path, meta, 0)
    assert step == 8 and torch.equal(torch.rand(3), expected)
    assert torch.equal(state["model"]["weight"], model.weight.detach())
    later = ckpt.CheckpointMeta(12, 1, 4, "cnn", "digits")
    ckpt.save_checkpoint(tmp_path, later, 0, lambda: {}, lambda: None, keep=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-00000012"]
    with pytest.raises(UsageError, match="global_batch=4, this run has 8"):
        ckpt.load_checkpoint(
            tmp_path / "step-00000012", ckpt.CheckpointMeta(0, 1, 8, "cnn", "digits"), 0
        )


def test_fault_spec_parsing():
    pytest.importorskip("torch")
    from osu_dl_bench.train.checkpoint import parse_fault

    assert parse_fault("") is None and parse_fault("1:7") == (1, 7)
    with pytest.raises(UsageError, match="expected RANK:STEP"):
        parse_fault("rank1")


@needs_torch
def test_every_model_name_is_built_and_runs_on_digits():
    import torch

    from osu_dl_bench.train.models import BUILDERS, InputShape, build_model

    assert tuple(BUILDERS) == MODELS
    cfg = config_from_args(_args("--depth", "10", "--width", "4"))
    for name in MODELS:
        model = build_model(replace(cfg, model=name), InputShape(1, 8, 10))
        assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 10)


@needs_torch
def test_buckets_in_registered_memory_hold_the_gradients():
    import torch

    from collectives import registered
    from osu_dl_bench.train.buckets import make_buckets

    if registered.unavailable_reason():
        pytest.skip(registered.unavailable_reason())
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    buckets = make_buckets(list(model.parameters()), 100, 50, registered.zeros)
    for bucket in buckets:
        assert registered.region_of(bucket.array) is not None
        assert bucket.flat.data_ptr() == bucket.array.ctypes.data
    model(torch.ones(3, 8)).sum().backward()
    # backward accumulated into the .grad views, i.e. into the registered buffers
    assert all(bucket.array.any() for bucket in buckets)


# --- validation in float64 ------------------------------------------------------------------


def test_validate_trains_in_float64_with_a_float64_tolerance():
    from osu_dl_bench.train.config import FLOAT64_TOLERANCE

    plain, checked = config_from_args(_args()), config_from_args(_args("--validate"))
    assert plain.compute_dtype == "float32" and checked.compute_dtype == "float64"
    assert checked.tolerance is None  # derived from the run (validate.tolerance_for)
    assert 1e-12 < FLOAT64_TOLERANCE <= 1e-9
    with pytest.raises(UsageError, match="--tolerance applies only with --validate"):
        config_from_args(_args("--tolerance", "1e-6"))
    for bad in ("nan", "inf", "0", "-1e-9"):
        with pytest.raises(UsageError, match="--tolerance must be a positive finite number"):
            config_from_args(_args("--validate", f"--tolerance={bad}"))


@needs_torch
def test_tolerance_is_stated_per_mode_and_fp16_scales_with_the_parameters():
    from osu_dl_bench.train.config import FLOAT64_TOLERANCE, FP16_RELATIVE_TOLERANCE
    from osu_dl_bench.train.validate import tolerance_for

    cfg = config_from_args(_args("--validate"))
    assert tolerance_for(cfg, scale=3.0) == FLOAT64_TOLERANCE
    fp16 = replace(cfg, fp16_compress=True)
    assert tolerance_for(fp16, scale=3.0) == pytest.approx(3.0 * FP16_RELATIVE_TOLERANCE)
    # The fp16 bound never drops below float64's (parameters all near zero).
    assert tolerance_for(fp16, scale=0.0) == FLOAT64_TOLERANCE
    assert tolerance_for(replace(fp16, tolerance=0.5), scale=3.0) == 0.5


@needs_torch
def test_comparison_names_the_worst_element_and_treats_nan_as_worst():
    import torch

    from osu_dl_bench.train.validate import worst_element

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)).double()
    reference = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()
    assert worst_element(model, reference) == (0.0, "0.weight[0, 0]")
    with torch.no_grad():
        model[1].weight[1, 2] += 1e-9
        model[0].bias[3] += 1e-10
    diff, where = worst_element(model, reference)
    assert where == "1.weight[1, 2]" and diff == pytest.approx(1e-9, rel=1e-6)
    with torch.no_grad():
        model[0].bias[1] = float("nan")
    diff, where = worst_element(model, reference)
    assert np.isnan(diff) and where == "0.bias[1]"


def test_wrong_allreduce_hook_parses_and_perturbs_one_element():
    from osu_dl_bench.train.comm_hooks import (
        WRONG_ALLREDUCE_ENV,
        parse_wrong_allreduce,
        perturb_first_element,
        wrong_allreduce_hook,
    )

    assert parse_wrong_allreduce("") is None
    assert parse_wrong_allreduce("1:0") == (1, 0, 1e-6)
    assert parse_wrong_allreduce(" 2:1:1e-3 ") == (2, 1, 1e-3)
    for bad in ("1", "a:0", "1:0:x", "1:0:nan", "-1:0", "1:0:0"):
        with pytest.raises(UsageError, match=WRONG_ALLREDUCE_ENV):
            parse_wrong_allreduce(bad)
    hook = {WRONG_ALLREDUCE_ENV: "0:0"}
    assert wrong_allreduce_hook(hook, validate=True) == (0, 0, 1e-6)
    assert wrong_allreduce_hook({}, validate=False) is None
    with pytest.raises(UsageError, match="a test hook for --validate: unset it"):
        wrong_allreduce_hook(hook, validate=False)
    calls = []
    reduce = perturb_first_element(lambda buf: calls.append(buf.copy()), 0.25)
    buffer = np.ones(4)
    reduce(buffer)
    assert len(calls) == 1 and np.array_equal(calls[0], np.ones(4))  # after the reduce
    assert buffer.tolist() == [1.25, 1.0, 1.0, 1.0]


# --- checkpoint durability and loading --------------------------------------------------------


def _meta(step: int, batch: int = 4):
    from osu_dl_bench.train.checkpoint import CheckpointMeta

    return CheckpointMeta(step=step, nprocs=1, global_batch=batch, model="cnn", data="digits")


def _save(root, step: int, state=None, keep: int = 2):
    from osu_dl_bench.train import checkpoint as ckpt

    return ckpt.save_checkpoint(root, _meta(step), 0, lambda: state or {}, lambda: None, keep)


@needs_torch
def test_checkpoint_round_trips_model_and_optimizer_state(tmp_path):
    import torch

    from osu_dl_bench.train import checkpoint as ckpt

    model = torch.nn.Linear(4, 3).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(2, 4, dtype=torch.float64)).sum().backward()
    optimizer.step()  # momentum buffers exist now
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    path = _save(tmp_path, 3, state)
    step, loaded = ckpt.load_checkpoint(ckpt.latest_checkpoint(tmp_path), _meta(0), 0)
    assert step == 3 and path.name == "step-00000003"
    for key, value in state["model"].items():
        assert loaded["model"][key].dtype == torch.float64
        assert torch.equal(loaded["model"][key], value)
    momentum = [s["momentum_buffer"] for s in optimizer.state_dict()["state"].values()]
    restored = [s["momentum_buffer"] for s in loaded["optimizer"]["state"].values()]
    assert len(momentum) == 2 and all(map(torch.equal, momentum, restored))


@needs_torch
def test_leftovers_of_a_crash_mid_write_are_pruned_at_start_and_on_save(tmp_path):
    from osu_dl_bench.train import checkpoint as ckpt

    _save(tmp_path, 4)
    (tmp_path / "step-00000008.partial").mkdir()  # a crash before the rename
    (tmp_path / "step-00000008.partial" / "state.pt").write_bytes(b"half")
    (tmp_path / ".latest.tmp").write_text("step-000")  # a crash before replacing 'latest'
    (tmp_path / "notes.txt").write_text("mine")  # not ours: kept
    assert ckpt.prune_leftovers(tmp_path) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "notes.txt", "step-00000004"]
    (tmp_path / "step-00000012.partial").mkdir()
    _save(tmp_path, 8)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["latest", "notes.txt", "step-00000004", "step-00000008"]
    assert ckpt.prune_leftovers(tmp_path / "missing") == 0


@needs_torch
def test_renames_are_followed_by_an_fsync_of_their_directory(tmp_path, monkeypatch):
    import os
    import stat

    events = []
    replace, fsync = os.replace, os.fsync

    def logged_replace(src, dst):
        replace(src, dst)
        events.append(("replace", os.path.dirname(os.path.abspath(dst))))

    def logged_fsync(fd):
        fsync(fd)
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))

    monkeypatch.setattr(os, "replace", logged_replace)
    monkeypatch.setattr(os, "fsync", logged_fsync)
    _save(tmp_path, 4)
    renames = [i for i, e in enumerate(events) if e[0] == "replace"]
    assert len(renames) == 5  # rng, state, meta into the partial; the partial; 'latest'
    for index in renames:
        assert events[index + 1] == ("fsync", events[index][1]), events


class _Payload:
    """Unpickling this calls os.mkdir(marker): what a hostile checkpoint would do."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        import os

        return (os.mkdir, (self.marker,))


@needs_torch
def test_checkpoint_loading_refuses_pickled_objects_and_bad_pointers(tmp_path):
    import torch

    from osu_dl_bench.train import checkpoint as ckpt

    path = _save(tmp_path, 4, {"model": {}})
    marker = tmp_path / "payload-ran"
    torch.save({"model": _Payload(marker)}, path / "state.pt")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's warnings are ours to silence
        with pytest.raises(UsageError) as info:
            ckpt.load_checkpoint(path, _meta(0), 0)
    assert re.fullmatch(
        r"checkpoint \S+state\.pt: refused by torch\.load\(weights_only=True\): it needs "
        r"posix\.mkdir, which a checkpoint of this trainer never holds",
        str(info.value),
    )
    assert not marker.exists()
    # A bare pickle (protocol 4, no zip): torch warns and advises filing an issue.
    (path / "state.pt").write_bytes(pickle.dumps(_Payload(marker), protocol=4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UsageError, match="refused.*weights_only=True.*opcode") as info:
            ckpt.load_checkpoint(path, _meta(0), 0)
    assert "issue" not in str(info.value) and "\n" not in str(info.value)
    assert not marker.exists()
    (path / "state.pt").write_bytes(b"truncated")
    with pytest.raises(UsageError, match="state.pt.*cannot be read"):
        ckpt.load_checkpoint(path, _meta(0), 0)
    (path / "meta.json").write_text("{")
    with pytest.raises(UsageError, match="meta.json.*not JSON"):
        ckpt.load_checkpoint(path, _meta(0), 0)
    for pointer in ("../outside", "/etc", "step-1"):
        (tmp_path / "latest").write_text(pointer)
        with pytest.raises(UsageError, match="expected step-NNNNNNNN"):
            ckpt.latest_checkpoint(tmp_path)
    secret = tmp_path / "secret"
    secret.write_text("root:SECRET:0:0\n")
    (tmp_path / "latest").unlink()
    (tmp_path / "latest").symlink_to(secret)
    with pytest.raises(UsageError, match="latest is a symbolic link") as info:
        ckpt.latest_checkpoint(tmp_path)
    assert "SECRET" not in str(info.value)
    (tmp_path / "latest").unlink()
    (tmp_path / "latest").write_text("x" * 30 + "SECRET" * 20)
    with pytest.raises(UsageError, match="over 64 bytes") as info:
        ckpt.latest_checkpoint(tmp_path)
    assert "SECRET" not in str(info.value)
    (tmp_path / "latest").write_text("y" * 30 + "SECRET")
    with pytest.raises(UsageError, match="holds 'y{24}'...: expected") as info:
        ckpt.latest_checkpoint(tmp_path)
    assert "SECRET" not in str(info.value)


def test_train_refuses_torch_older_than_the_floor(monkeypatch):
    from osu_dl_bench.train import config as options

    monkeypatch.setattr(options, "_installed_version", lambda name: "2.5.1+cpu")
    with pytest.raises(UsageError, match="torch >= 2.10.*found 2.5.1"):
        options.require_libraries(config_from_args(_args()))
    monkeypatch.setattr(options, "_installed_version", lambda name: "2.10.0")
    options.require_libraries(config_from_args(_args()))


def test_the_atomic_writer_leaves_the_old_file_when_a_write_fails(tmp_path):
    from osu_dl_bench.paths import write_atomic

    target = tmp_path / "out.json"
    write_atomic(target, lambda p: p.write_text("old"))

    def full_disk(tmp):
        tmp.write_text("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        write_atomic(target, full_disk)
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"], "no temp file left"


# --- thread level ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "asked, now, replaced",
    [
        ("single", "serialized", "single"),
        ("FUNNELED", "serialized", "funneled"),
        ("serialized", "serialized", None),
        ("multiple", "multiple", None),  # more than needed: kept, it only costs speed
        ("bogus", "bogus", None),  # left for mpi4py to refuse with its own message
    ],
)
def test_the_trainer_overrides_a_thread_level_below_serialized(monkeypatch, asked, now, replaced):
    from osu_dl_bench.runtime.start import THREAD_LEVEL_ENV, raise_environment_thread_level

    monkeypatch.setenv(THREAD_LEVEL_ENV, asked)
    assert raise_environment_thread_level("serialized") == replaced
    assert os.environ[THREAD_LEVEL_ENV] == now


def test_an_unset_thread_level_stays_unset(monkeypatch):
    from osu_dl_bench.runtime.start import THREAD_LEVEL_ENV, raise_environment_thread_level

    monkeypatch.delenv(THREAD_LEVEL_ENV, raising=False)
    assert raise_environment_thread_level("serialized") is None
    assert THREAD_LEVEL_ENV not in os.environ


def test_an_inline_comm_thread_runs_calls_on_the_caller_in_order():
    import threading

    from osu_dl_bench.train.comm_thread import CommThread

    seen = []
    with CommThread(inline=True) as inline:
        future = inline.submit(lambda: seen.append(threading.get_ident()) or len(seen))
        assert future.done() and future.result() == 1  # ran before submit returned
        assert inline.run(lambda: threading.get_ident()) == threading.get_ident()
        failed = inline.submit(lambda: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            failed.result()
    with CommThread() as threaded:
        assert threaded.run(threading.get_ident) != threading.get_ident()
    assert seen == [threading.get_ident()]


# --- device ---------------------------------------------------------------------------------


def test_device_cuda_selects_cuda_buffers_and_refuses_registered_ones():
    assert config_from_args(_args("--device", "cuda")).buffers == "cuda"
    assert config_from_args(_args()).buffers == "cpu"
    with pytest.raises(UsageError, match="--buffers cpu-registered is for CPU"):
        config_from_args(_args("--device", "cuda", "--buffers", "cpu-registered"))


@needs_torch
def test_cpu_tensors_reach_the_collectives_as_numpy_views_with_nothing_to_wait_for():
    import torch

    from osu_dl_bench.train.device import array_view, host_copy, ready_marker

    flat = torch.zeros(4)
    view = array_view(flat)
    view[1] = 5.0  # the collectives write into the tensor itself
    assert isinstance(view, np.ndarray) and float(flat[1]) == 5.0
    assert ready_marker(flat)() is None and host_copy(flat) is not None
