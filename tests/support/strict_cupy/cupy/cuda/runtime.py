"""cupy.cuda.runtime of the strict stand-in. STRICT_CUPY_DEVICES (default 8) physical
devices on this host; CUDA_VISIBLE_DEVICES narrows and renumbers them, as CUDA does.

MIG (STRICT_CUPY_MIG=k: every GPU split into k instances): CUDA then enumerates the MIG
instances that CUDA_VISIBLE_DEVICES names by UUID ("MIG-<uuid>", as ``nvidia-smi -L``
lists them; ``mig_names()`` gives this host's), the first instance of GPU 0 where it
names none. An instance has its own UUID but its GPU's PCI bus id, as cudaDeviceProp
reports it (NVIDIA MIG user guide, "CUDA device enumeration"); NCCL compares bus ids."""

from __future__ import annotations

import hashlib
import os
import socket

initialised = False


class CUDARuntimeError(RuntimeError):
    pass


def _physical_count() -> int:
    return int(os.environ.get("STRICT_CUPY_DEVICES", "8"))


def _mig_instances() -> int:
    return int(os.environ.get("STRICT_CUPY_MIG", "0") or 0)


def _uuid(physical: int, instance: int | None) -> bytes:
    place = f"{physical}" if instance is None else f"{physical}:mig{instance}"
    return hashlib.md5(f"{socket.gethostname()}:{place}".encode()).digest()


def _uuid_text(uuid: bytes) -> str:
    h = uuid.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def mig_names(instances: int | None = None) -> dict[str, tuple[int, int]]:
    """This host's MIG instances (``instances`` per GPU, default STRICT_CUPY_MIG) by the
    name CUDA_VISIBLE_DEVICES takes -> (GPU, instance)."""
    per_gpu = _mig_instances() if instances is None else instances
    return {
        f"MIG-{_uuid_text(_uuid(p, i))}": (p, i)
        for p in range(_physical_count())
        for i in range(per_gpu)
    }


def _visible() -> list[tuple[int, int | None]]:
    """The devices CUDA enumerates: (physical GPU, MIG instance or None)."""
    global initialised
    initialised = True
    physical = _physical_count()
    mask = os.environ.get("CUDA_VISIBLE_DEVICES")
    if _mig_instances():
        names = mig_names()
        named = [names[x.strip()] for x in (mask or "").split(",") if x.strip() in names]
        return named if mask is not None else [(0, 0)]
    if mask is None:
        return [(p, None) for p in range(physical)]
    return [(int(x), None) for x in mask.split(",") if x.strip().isdigit() and int(x) < physical]


def getDeviceCount() -> int:  # noqa: N802 - cupy's name
    count = len(_visible())
    if count == 0:
        raise CUDARuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")
    return count


def getDeviceProperties(device: int) -> dict:  # noqa: N802 - cupy's name
    visible = _visible()
    if not 0 <= device < len(visible):
        raise CUDARuntimeError(f"cudaErrorInvalidDevice: device {device} of {len(visible)}")
    physical, instance = visible[device]
    return {
        "name": b"Strict fake GPU",
        "uuid": _uuid(physical, instance),
        "pciDomainID": 0,
        "pciBusID": physical,
        "pciDeviceID": 0,
    }


def deviceSynchronize() -> None:  # noqa: N802 - cupy's name
    import cupy

    cupy._synchronize()


def runtimeGetVersion() -> int:  # noqa: N802 - cupy's name
    return 12040


def driverGetVersion() -> int:  # noqa: N802 - cupy's name
    return 12040


def memGetInfo() -> tuple[int, int]:  # noqa: N802 - cupy's name
    """(free, total) bytes of the current device: STRICT_CUPY_DEVICE_MEMORY (default 16 GiB)
    less what the live device arrays hold."""
    import cupy

    _visible()
    total = int(os.environ.get("STRICT_CUPY_DEVICE_MEMORY", str(16 << 30)))
    return max(0, total - cupy.device_bytes_held()), total
