"""What a run on GPU buffers records of its GPU and of how MPI met device memory (direct or
staged): run metadata and records, tables written by tune, and the selector's warning when
a table measured on one path is used on the other (strict cupy stand-in)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mpi4py import MPI

from collectives import CallContext, device
from collectives.dtypes import element_type
from collectives.ops import reduce_op
from osu_dl_bench.runtime.metadata import collect_metadata
from osu_dl_bench.runtime.topology import discover_topology
from osu_dl_bench.selection import Selector
from osu_dl_bench.selection.table import TuningTable, load_table
from osu_dl_bench.selection.tune import measured_with

REPO = Path(__file__).resolve().parents[2]
GPU_FIELDS = ("gpu_model", "gpu_driver", "cuda_runtime", "nccl_version", "mpi_cuda")
WARNING = "osu-dl-bench: warning:"


def _metadata(device_kind: str) -> dict:
    return collect_metadata(discover_topology(MPI.COMM_SELF, None), device_kind).as_dict()


def test_metadata_on_cuda_carries_the_gpu_and_the_mpi_path(plain_mpi):
    found = _metadata("cuda")
    assert found["gpu_model"] == "Strict fake GPU"
    assert found["gpu_driver"] == "12.4" and found["cuda_runtime"] == "12.4"
    assert found["nccl_version"] == "2.23.4"
    assert found["mpi_cuda"] == "staged"
    assert found["mpi_cuda_source"] == f"{device.CUDA_AWARE_ENV}=0"


def test_metadata_on_the_host_carries_nothing_of_a_gpu(cupy):
    found = _metadata("cpu")
    assert not set(GPU_FIELDS) & set(found) and "mpi_cuda_source" not in found


def test_nccl_and_cuda_version_codes_read_as_their_headers_define_them():
    assert device.nccl_version_text(22805) == "2.28.5"
    assert device.nccl_version_text(2708) == "2.7.8"  # before NCCL 2.9's wider code
    assert device.cuda_version_text(12080) == "12.8"


class _Key:
    def __init__(self, device_kind):
        self.device = device_kind


class _Entry:
    def __init__(self, device_kind):
        self.key = _Key(device_kind)


@pytest.mark.parametrize("kind,path", [("cuda", "staged"), ("cuda", "direct"), ("cpu", None)])
def test_a_table_says_how_its_cuda_entries_met_device_memory(kind, path):
    metadata = {"jobs": {"2": {"mpi_cuda": "staged" if path is None else path}}}
    fields = measured_with("float32", "sum", (_Entry(kind),), metadata)
    assert fields.get("mpi_cuda") == path
    assert fields["dtype"] == "float32" and fields["op"] == "sum"


def _bind_on_cuda(header: dict, path: str = "t.json"):
    selector = Selector(TuningTable((), header, path), force={})
    ctx = CallContext(1, element_type("float32"), reduce_op("sum"), "cuda")
    for _ in range(3):  # one warning however often the selector binds
        selector.bind(MPI.COMM_SELF, "allreduce", ctx)
        selector.bind(MPI.COMM_SELF, "bcast", CallContext(1, element_type("float32"), None, "cuda"))


@pytest.mark.parametrize("measured", ["staged", "direct"])
def test_a_table_used_on_the_other_path_warns_once(cupy, monkeypatch, capsys, measured):
    monkeypatch.setenv(device.CUDA_AWARE_ENV, "1" if measured == "staged" else "0")
    _bind_on_cuda({"measured_with": {"dtype": "float32", "mpi_cuda": measured}})
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith(WARNING)]
    assert len(lines) == 1, lines
    assert (
        f"t.json was measured with MPI {'staged' if measured == 'staged' else 'reading'}"
        in lines[0]
    )
    assert f"({device.CUDA_AWARE_ENV}=" in lines[0]


@pytest.mark.parametrize("aware", ["0", "1"])
def test_a_table_used_on_its_own_path_does_not_warn(cupy, monkeypatch, capsys, aware):
    monkeypatch.setenv(device.CUDA_AWARE_ENV, aware)
    path = "direct" if aware == "1" else "staged"
    _bind_on_cuda({"measured_with": {"dtype": "float32", "mpi_cuda": path}})
    assert WARNING not in capsys.readouterr().err


def test_a_table_on_the_host_never_compares_the_gpu_path(monkeypatch, capsys):
    monkeypatch.setenv(device.CUDA_AWARE_ENV, "1")
    selector = Selector(TuningTable((), {"measured_with": {"mpi_cuda": "staged"}}, "t"), force={})
    selector.bind(
        MPI.COMM_SELF, "allreduce", CallContext(1, element_type("float32"), reduce_op("sum"))
    )
    assert WARNING not in capsys.readouterr().err


def test_an_older_table_without_the_field_loads_and_binds_on_cuda_without_warning(
    cupy, capsys, tmp_path
):
    shipped = REPO / "tuning_tables" / "reference-cpu-mpich-1node.json"
    assert "mpi_cuda" not in json.loads(shipped.read_text()).get("measured_with", {})
    table = load_table(shipped)
    _bind_on_cuda(dict(table.header), str(shipped))
    assert WARNING not in capsys.readouterr().err


def test_a_table_with_the_field_loads_and_one_with_a_wrong_value_is_refused(tmp_path):
    shipped = json.loads((REPO / "tuning_tables" / "reference-cpu-mpich-1node.json").read_text())
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(
        json.dumps({**shipped, "measured_with": {"dtype": "float32", "mpi_cuda": "staged"}})
    )
    bad.write_text(
        json.dumps({**shipped, "measured_with": {"dtype": "float32", "mpi_cuda": "yes"}})
    )
    assert load_table(good).header["measured_with"]["mpi_cuda"] == "staged"
    with pytest.raises(Exception, match="mpi_cuda"):
        load_table(bad)
