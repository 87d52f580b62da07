"""The MPI library's own algorithm choices, read from the library through the MPI tool
information interface (MPI_T control variables, MPI 4.1 standard chapter 15.3), and the
environment that forces one of them for a whole launch.

mpi4py does not wrap MPI_T, so the functions are called with ctypes on the libmpi that
mpi4py loaded (found in /proc/self/maps; ``MPI_T_init_thread`` may be called before or
after MPI_Init). Nothing here loads MPI at import: ``forcing_environment`` and the names
of the variables are pure data, usable by a process that must not start MPI (the sweep's
orchestrator); the readers load mpi4py.MPI on first use.

Libraries:
- MPICH registers its algorithm variables (``MPIR_CVAR_<COLL>_INTRA_ALGORITHM``, the ch4
  POSIX layer's ``MPIR_CVAR_<COLL>_POSIX_INTRA_ALGORITHM``) as MPI_INT without an MPI_T
  enumeration; their description lists the choices one a line, ``name - text``, in the
  order of their integer values (MPICH's maint/extractcvars turns each enum into that
  text), so the choices are read from there.
- Open MPI exposes MCA variables as MPI_T control variables (``coll_tuned_allreduce_algorithm``)
  with an MPI_T enumeration of the algorithm ids and names (ompi/mpi/tool/cvar_get_info.c).

Forcing: environment variables set at launch always take effect (MPICH reads its CVARs at
MPI_Init; Open MPI's coll/tuned reads ``coll_tuned_<coll>_algorithm`` when it needs
``coll_tuned_use_dynamic_rules=1``). An MPI_T write of MPICH's
MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM is accepted and reads back, but the fingerprints
(below) show it is not the same as setting it at launch: at thread level single a write of
'ring' ran ring at 32 KiB and another algorithm from 64 KiB at p = 2, where the variable set
at launch ran ring at every size (tests/mpi/test_library_tuning.py). So the sweep, bench and
verify-export force through the environment only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from collectives import mpich_layers
from collectives.errors import UsageError

# The collectives whose library algorithms are candidates (``native:alg=NAME``).
COLLECTIVES = ("allreduce", "bcast")
# The library's "let me decide" value: plain native, never a forced candidate.
AUTO = "auto"
# MPICH: an ``alg`` value with this prefix names the ch4 POSIX layer's choice
# (native:alg=posix_mpir forces MPIR_CVAR_<COLL>_POSIX_INTRA_ALGORITHM=mpir).
POSIX_PREFIX = "posix_"
LIBRARIES = ("mpich", "openmpi")
# MPI_T's success code is 0 in every library (MPI_SUCCESS).
_SUCCESS = 0
# A choice line of an MPICH description: 'ring   - Force ring algorithm'.
_CHOICE_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s+-\s")


@dataclass(frozen=True)
class ControlVariable:
    """One MPI_T control variable: its index, name, description and its choices
    ((value, name) pairs: the MPI_T enumeration, else those its description lists)."""

    index: int
    name: str
    description: str
    choices: tuple[tuple[int, str], ...] = ()

    def choice_name(self, value: int) -> str:
        """The name of ``value`` (its number as text when the library names none)."""
        return dict(self.choices).get(value, str(value))

    def choice_value(self, name: str) -> int | None:
        """The value named ``name``, or None if this variable has no such choice."""
        return next((v for v, n in self.choices if n == name), None)


def choices_from_description(text: str) -> tuple[tuple[int, str], ...]:
    """MPICH's choice lines of a description as (value, name), values in line order."""
    names = [m.group(1) for line in text.splitlines() if (m := _CHOICE_LINE.match(line))]
    return tuple(enumerate(names))


# --- the variables' names (no MPI) --------------------------------------------------------


def mpich_variable(collective: str, alg: str) -> tuple[str, str]:
    """(MPICH variable, value) that forces ``alg`` of ``collective``: the POSIX layer's for
    'posix_NAME', else the MPIR intra-communicator algorithm."""
    coll = collective.upper()
    if alg.startswith(POSIX_PREFIX):
        return f"MPIR_CVAR_{coll}_POSIX_INTRA_ALGORITHM", alg.removeprefix(POSIX_PREFIX)
    return f"MPIR_CVAR_{coll}_INTRA_ALGORITHM", alg


def openmpi_variable(collective: str) -> str:
    """Open MPI's coll/tuned MCA variable of a collective's forced algorithm."""
    return f"coll_tuned_{collective}_algorithm"


def forcing_environment(library: str, forced: Mapping[str, str]) -> dict[str, str]:
    """The environment a launch needs so that each collective of ``forced``
    (collective -> alg) runs that algorithm of ``library``."""
    env: dict[str, str] = {}
    for collective, alg in forced.items():
        if library == "mpich":
            # The CVAR of an MPIR or POSIX algorithm (an older run's candidates, and
            # verify-export's forced runs); a sweep's MPICH candidates load selection files
            # instead (runtime.mpich_trees.candidate_files_env).
            name, value = mpich_variable(collective, alg)
            env[name] = value
        elif library == "openmpi":
            env["OMPI_MCA_coll_tuned_use_dynamic_rules"] = "1"
            env[f"OMPI_MCA_{openmpi_variable(collective)}"] = alg
        else:
            raise UsageError(f"unknown MPI library {library!r}: expected one of {LIBRARIES}")
    return env


def library_of(version_text: str) -> str | None:
    """'mpich' or 'openmpi' from MPI_Get_library_version's text (None: another library)."""
    text = version_text.lower()
    if "open mpi" in text:
        return "openmpi"
    if "mpich" in text or "mvapich" in text or "intel(r) mpi" in text:
        return "mpich"
    return None


def distribution_of(version_text: str) -> str:
    """Which build of a library MPI_Get_library_version's text names, finer than
    ``library_of`` where builds differ in what they read from the environment:
    'cray-mpich', 'mvapich2', 'mvapich' (3.x and MVAPICH-Plus), 'mpich', 'openmpi',
    'intel' or 'unknown'. Derived builds are tested before the MPICH they carry."""
    text = version_text.lower()
    for marker, name in _DISTRIBUTIONS:
        if marker in text:
            return name
    return "unknown"


# Cray MPICH prints "CRAY MPICH version ..."; MVAPICH2 "MVAPICH2 Version"; MVAPICH 3 and
# MVAPICH-Plus "MVAPICH..." without the 2; Intel MPI "Intel(R) MPI Library".
_DISTRIBUTIONS = (
    ("cray mpich", "cray-mpich"),
    ("mvapich2", "mvapich2"),
    ("mvapich", "mvapich"),
    ("open mpi", "openmpi"),
    ("intel(r) mpi", "intel"),
    ("mpich", "mpich"),
)


# --- reading the library (loads MPI) ------------------------------------------------------


def mpi_loaded() -> bool:
    """Whether this process has loaded mpi4py.MPI (then reading MPI_T starts nothing new)."""
    return "mpi4py.MPI" in sys.modules


def _loaded_libmpi() -> str | None:
    """The path of the libmpi this process mapped (mpi4py's), from /proc/self/maps."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            paths = {line.split()[-1] for line in maps if "/" in line}
    except OSError:
        return None
    found = sorted(p for p in paths if os.path.basename(p).startswith("libmpi"))
    # libmpi.so.N before helpers such as libmpi_abi or libmpi_mpifh.
    found.sort(key=lambda p: (not re.fullmatch(r"libmpi\.so(\.\d+)*", os.path.basename(p)), p))
    return found[0] if found else None


@cache
def _library() -> ctypes.CDLL:
    """The MPI library mpi4py loaded, with MPI_T initialised."""
    from collectives import mpi

    mpi.load()
    path = _loaded_libmpi() or ctypes.util.find_library("mpi")
    if path is None:
        raise UsageError("MPI_T: cannot find the MPI library this process loaded")
    lib = ctypes.CDLL(path)
    if not hasattr(lib, "MPI_T_init_thread"):
        raise UsageError(f"MPI_T: {path} has no MPI_T_init_thread")
    provided = ctypes.c_int()
    _check(lib.MPI_T_init_thread(0, ctypes.byref(provided)), "MPI_T_init_thread")
    return lib


def _check(code: int, call: str) -> None:
    if code != _SUCCESS:
        raise UsageError(f"MPI_T: {call} failed with error {code}")


def _text(size: int = 4096) -> tuple[ctypes.Array, ctypes.c_int]:
    return ctypes.create_string_buffer(size), ctypes.c_int(size)


def _enum_items(lib: ctypes.CDLL, enum: ctypes.c_void_p) -> tuple[tuple[int, str], ...]:
    """The (value, name) items of an MPI_T enumeration."""
    count = ctypes.c_int()
    name, length = _text(256)
    _check(lib.MPI_T_enum_get_info(enum, ctypes.byref(count), name, ctypes.byref(length)), "enum")
    items = []
    for index in range(count.value):
        value = ctypes.c_int()
        item, length = _text(256)
        code = lib.MPI_T_enum_get_item(enum, index, ctypes.byref(value), item, ctypes.byref(length))
        _check(code, "MPI_T_enum_get_item")
        items.append((value.value, item.value.decode(errors="replace")))
    return tuple(items)


def _variable(lib: ctypes.CDLL, index: int) -> ControlVariable | None:
    name, name_len = _text(256)
    desc, desc_len = _text(8192)
    verbosity, bind, scope = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    # MPI_Datatype and MPI_T_enum are handles: an int (MPICH) or a pointer (Open MPI);
    # pointer-sized storage holds either.
    datatype, enum = ctypes.c_void_p(), ctypes.c_void_p()
    code = lib.MPI_T_cvar_get_info(
        index,
        name,
        ctypes.byref(name_len),
        ctypes.byref(verbosity),
        ctypes.byref(datatype),
        ctypes.byref(enum),
        desc,
        ctypes.byref(desc_len),
        ctypes.byref(bind),
        ctypes.byref(scope),
    )
    if code != _SUCCESS:
        return None  # Open MPI reports some indices invalid (variables of closed components)
    text = desc.value.decode(errors="replace")
    # MPI_T_ENUM_NULL is a null handle in both libraries.
    choices = _enum_items(lib, enum) if enum.value else choices_from_description(text)
    return ControlVariable(index, name.value.decode(errors="replace"), text, choices)


@cache
def control_variables() -> dict[str, ControlVariable]:
    """Every control variable of the library, by name."""
    lib = _library()
    count = ctypes.c_int()
    _check(lib.MPI_T_cvar_get_num(ctypes.byref(count)), "MPI_T_cvar_get_num")
    found = (_variable(lib, index) for index in range(count.value))
    return {var.name: var for var in found if var is not None}


def variable(name: str) -> ControlVariable | None:
    """The control variable ``name``, or None if the library has none of that name."""
    return control_variables().get(name)


def _handle(index: int) -> ctypes.c_void_p:
    handle, count = ctypes.c_void_p(), ctypes.c_int()
    code = _library().MPI_T_cvar_handle_alloc(
        index, None, ctypes.byref(handle), ctypes.byref(count)
    )
    _check(code, "MPI_T_cvar_handle_alloc")
    return handle


def read_value(name: str) -> int:
    """The current integer value of control variable ``name``."""
    var = variable(name)
    if var is None:
        raise UsageError(f"MPI_T: the library has no control variable {name}")
    handle = _handle(var.index)
    # 8 bytes: an MPI_INT or MPI_UNSIGNED value fits in the low half on x86-64/aarch64.
    value = ctypes.c_int64(0)
    try:
        _check(_library().MPI_T_cvar_read(handle, ctypes.byref(value)), f"reading {name}")
    finally:
        _library().MPI_T_cvar_handle_free(ctypes.byref(handle))
    return ctypes.c_int32(value.value & 0xFFFFFFFF).value


def write_value(name: str, value: int) -> None:
    """Write control variable ``name`` (its effect is the library's to decide)."""
    var = variable(name)
    if var is None:
        raise UsageError(f"MPI_T: the library has no control variable {name}")
    handle = _handle(var.index)
    number = ctypes.c_int(value)
    try:
        _check(_library().MPI_T_cvar_write(handle, ctypes.byref(number)), f"writing {name}")
    finally:
        _library().MPI_T_cvar_handle_free(ctypes.byref(handle))


def current_choice(name: str) -> str:
    """The name of the current value of control variable ``name``."""
    value = read_value(name)
    var = variable(name)
    return var.choice_name(value) if var is not None else str(value)


@cache
def running_library() -> str | None:
    """'mpich' or 'openmpi': the library mpi4py loaded (None: another one)."""
    from collectives import mpi

    return library_of(mpi.load().Get_library_version())


# --- the library's algorithms of a collective ---------------------------------------------


@dataclass(frozen=True)
class LibraryAlgorithm:
    """A forcible algorithm of the running library: its ``alg`` name, the variable and
    value that force it."""

    collective: str
    alg: str
    variable: str
    value: str
    legacy: bool = False


def _mpich_algorithms(collective: str) -> list[LibraryAlgorithm]:
    """MPICH's layered candidates (mpich_layers), each set through the selection files a
    launch loads and named in CANDIDATES_VARIABLE; then, for verify-export's forced runs
    of the algorithms an MPIR file names, MPICH's CVAR-forced algorithms (``legacy``: no
    sweep's ``native:alg=all`` expands to them, since on one node MPICH ignores them)."""
    found = [
        LibraryAlgorithm(collective, c.alg, mpich_layers.CANDIDATES_VARIABLE, c.alg)
        for c in mpich_layers.candidates(collective)
    ]
    for alg_prefix in ("", POSIX_PREFIX):
        name, _ = mpich_variable(collective, alg_prefix + "x")
        var = variable(name)
        for _, choice in var.choices if var else ():
            alg = alg_prefix + choice
            if choice != AUTO and alg not in {a.alg for a in found}:
                found.append(LibraryAlgorithm(collective, alg, name, choice, legacy=True))
    return found


def _openmpi_algorithms(collective: str) -> list[LibraryAlgorithm]:
    name = openmpi_variable(collective)
    var = variable(name)
    # 0 ('ignore') lets Open MPI's fixed decision choose: that is plain native.
    return [
        LibraryAlgorithm(collective, choice, name, choice)
        for value, choice in (var.choices if var else ())
        if value != 0 and choice != AUTO
    ]


def library_algorithms(collective: str) -> list[LibraryAlgorithm]:
    """The algorithms of ``collective`` the running library can be forced to run, as its
    control variables enumerate them (none for a collective or library not covered)."""
    if collective not in COLLECTIVES:
        return []
    library = running_library()
    if library == "mpich":
        return _mpich_algorithms(collective)
    if library == "openmpi":
        return _openmpi_algorithms(collective)
    return []


def library_algorithm(collective: str, alg: str) -> LibraryAlgorithm:
    """The library algorithm ``alg`` of ``collective``, or a UsageError naming the choices."""
    found = {a.alg: a for a in library_algorithms(collective)}
    if alg not in found:
        names = ", ".join(found) or "none (not read from this library)"
        raise UsageError(
            f"native:alg={alg}: the MPI library offers no such {collective} algorithm: "
            f"expected one of {names}"
        )
    return found[alg]


# The variables that load MPICH's three selection files (runtime/mpich_trees.py).
MPICH_FILE_VARIABLES = (
    "MPIR_CVAR_CH4_COLL_SELECTION_TUNING_JSON_FILE",
    "MPIR_CVAR_CH4_POSIX_COLL_SELECTION_TUNING_JSON_FILE",
    "MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE",
)


def _mpich_files_problem(collective: str, alg: str) -> str | None:
    """None if this launch loads the selection files of MPICH candidate ``alg``, else why
    not: the launch must be started with them (a sweep's launches are)."""
    named = os.environ.get(mpich_layers.CANDIDATES_VARIABLE, "")
    missing = [v for v in MPICH_FILE_VARIABLES if not os.environ.get(v)]
    if f"{collective}={alg}" in named.split(",") and not missing:
        return None
    return (
        f"native:alg={alg} runs only in a launch that loads its MPICH selection files "
        f"({', '.join(MPICH_FILE_VARIABLES)} and {mpich_layers.CANDIDATES_VARIABLE}="
        f"{collective}={alg}): a sweep's launches are started so; here "
        f"{mpich_layers.CANDIDATES_VARIABLE}={named or '(unset)'}"
    )


def variable_value_text(name: str) -> str:
    """'NAME=VALUE' as the library reads it now (VALUE '?' if it cannot be read)."""
    try:
        return f"{name}={current_choice(name)}"
    except UsageError:
        return f"{name}=?"


def launch_setting(library: str, collective: str, alg: str) -> str:
    """How to set ``alg`` at launch, in words: 'VAR=VALUE' for the environment."""
    if library == "mpich" and mpich_layers.is_candidate(collective, alg):
        return (
            f"the three MPICH selection files of candidate {alg} "
            "(osu_dl_bench.runtime.mpich_trees.candidate_files_env writes them)"
        )
    return " ".join(f"{k}={v}" for k, v in forcing_environment(library, {collective: alg}).items())


def forcing_problem(collective: str, alg: str) -> str | None:
    """None if this launch's library runs ``alg`` for ``collective`` (its variable reads
    back as that algorithm), else a message naming what to set at launch."""
    wanted = library_algorithm(collective, alg)
    library = running_library() or "mpich"
    if library == "mpich" and not wanted.legacy:
        return _mpich_files_problem(collective, alg)
    checks = [(wanted.variable, wanted.value)]
    if library == "openmpi":
        checks.append(("coll_tuned_use_dynamic_rules", "1"))
    for name, value in checks:
        var = variable(name)
        now = current_choice(name) if var is not None else "?"
        if now != value and not (value == "1" and now == "true"):
            return (
                f"native:alg={alg} runs only in a launch started with "
                f"{launch_setting(library, collective, alg)} in its environment (here {name} "
                f"is {now}): e.g. `{launch_setting(library, collective, alg)} mpiexec ...`"
            )
    return None


# What each library reads a selection file as: MPICH's JSON selection tree, Open MPI's
# classic dynamic rules (coll_tuned_dynamic_file.c); the exports name them so.
SELECTION_FILE_SUFFIXES = {"mpich": ".json", "openmpi": ".rules"}


def selection_file_library(path: str) -> str | None:
    """The library an exported selection file is for, from its name (None: neither)."""
    for library, suffix in SELECTION_FILE_SUFFIXES.items():
        if path.endswith(suffix) and not path.endswith(".openmpi.json"):
            return library
    return None


# An MPICH selection tree's leaf that names an algorithm of an intra-communicator
# collective: 'algorithm=MPIR_Allreduce_intra_ring', 'algorithm=MPIR_Bcast_allcomm_nb'
# (the names of MPICH's src/mpi/coll/*/ functions, as its CVAR values without the prefix).
_MPICH_LEAF = re.compile(r"algorithm=MPIR_([A-Z][a-z]+)_(intra_(\w+)|allcomm_nb)")


def mpich_file_algorithms(path: str) -> list[tuple[str, str]]:
    """(collective, alg) of every allreduce and bcast algorithm an MPICH selection file
    names, as the CVAR values name them ([] for a file that cannot be read as JSON: the
    readers say why)."""
    import json

    try:
        with open(path, "rb") as handle:
            tree = json.loads(handle.read(64 << 20))
    except (OSError, ValueError, RecursionError):
        return []
    found, stack = [], [tree]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        for key, child in node.items():
            match = _MPICH_LEAF.fullmatch(str(key))
            if match and match[1].lower() in COLLECTIVES:
                found.append((match[1].lower(), match[3] or "nb"))
            stack.append(child)
    return found


# The MPIR file of MPICH's three-file export (selection/exports/mpich.py), and its
# siblings of the other layers, by the variable that loads each.
MPICH_EXPORT_SIBLINGS = {
    ".mpich.ch4.json": mpich_layers.FILE_VARIABLES["ch4"],
    ".mpich.posix.json": mpich_layers.FILE_VARIABLES["posix"],
}
MPICH_EXPORT_MPIR = ".mpich.mpir.json"


def mpich_export_environment(path: str) -> dict[str, str]:
    """The variables that load an MPICH export given by its MPIR file ``path``: the three
    files of a three-file export (its ch4 and POSIX siblings beside it), with
    MPIR_CVAR_COLLECTIVE_FALLBACK=error; an older single-file export as the MPIR layer
    alone."""
    env = {mpich_layers.FILE_VARIABLES["mpir"]: path, **mpich_export_siblings(path)}
    if len(env) == 3:
        env[mpich_layers.FALLBACK_VARIABLE] = "error"
    return env


def mpich_export_siblings(path: str) -> dict[str, str]:
    """Variable -> file of the ch4 and POSIX siblings of a three-file export's MPIR file
    ``path`` ({} for an older single file); UsageError where one is not there: half an
    export would load other trees than the ones read back and measured."""
    if not path.endswith(MPICH_EXPORT_MPIR):
        return {}
    base = path.removesuffix(MPICH_EXPORT_MPIR)
    files = {name: base + suffix for suffix, name in MPICH_EXPORT_SIBLINGS.items()}
    missing = [file for file in files.values() if not os.path.isfile(file)]
    if missing:
        raise UsageError(
            f"{path}: its export is three files (ch4, POSIX, MPIR trees), but "
            f"{' and '.join(missing)} is not there: export the table again"
        )
    return files


def mpich_export_mpir_file(text: str) -> str:
    """The MPIR file of the MPICH export ``text`` names: the export's base name (BASE of
    BASE.mpich.mpir.json) or any one of its three files; any other path as given (an
    older single-file export)."""
    for suffix in MPICH_EXPORT_SIBLINGS:
        if text.endswith(suffix):
            return text.removesuffix(suffix) + MPICH_EXPORT_MPIR
    if not os.path.exists(text) and os.path.isfile(text + MPICH_EXPORT_MPIR):
        return text + MPICH_EXPORT_MPIR
    return text


def _offered(collectives: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(c, a.alg) for c in collectives for a in library_algorithms(c)]


def selection_file_environment(library: str, path: str) -> dict[str, str]:
    """The environment that makes ``library`` take its collective selection from ``path``
    (an exported file), with no algorithm forced over it; UsageError for a file of the
    other library (MPICH handed Open MPI's rules crashed its ranks with signal 11)."""
    meant = selection_file_library(path)
    if meant is not None and meant != library:
        raise UsageError(
            f"{path} is a selection file for {meant}, but the jobs run {library}: give "
            f"{library}'s export (NAME.{library}{SELECTION_FILE_SUFFIXES[library]}) or --mpi "
            f"{meant}"
        )
    if library == "mpich" and mpi_loaded():  # the planner: MPI is up, nothing launched yet
        unknown = sorted(set(mpich_file_algorithms(path)) - set(_offered(COLLECTIVES)))
        if unknown:
            named = ", ".join(f"{c} {a}" for c, a in unknown[:5])
            raise UsageError(
                f"{path} names algorithms this MPICH does not have ({named}): MPICH would "
                "abort every rank with an internal error when it reads the file"
            )
    if library == "mpich":
        env = mpich_export_environment(path)
        # A forced algorithm would win over the file (MPICH checks the CVAR first).
        env.update({mpich_variable(c, AUTO)[0]: AUTO for c in COLLECTIVES})
        return env
    if library == "openmpi":
        return {
            "OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
            "OMPI_MCA_coll_tuned_dynamic_rules_filename": path,
        }
    raise UsageError(f"unknown MPI library {library!r}: expected one of {LIBRARIES}")


# --- fingerprints: which algorithm combined an allreduce ----------------------------------
#
# A reduction declared commutative that is not (b*31 + a*7 + 1 on uint64) makes the result
# depend on the order in which the algorithm combines the ranks' values: each algorithm
# leaves its own fingerprint (tests/mpi/test_exports.py proves exports this way).

_FINGERPRINT_MODULUS = 999983


def _mix(inbuf, inoutbuf, datatype) -> None:
    import numpy as np

    a = np.frombuffer(inbuf, dtype=np.uint64)
    b = np.frombuffer(inoutbuf, dtype=np.uint64)
    b[:] = b * np.uint64(31) + a * np.uint64(7) + np.uint64(1)


def fingerprints(comm, sizes: list[int]) -> dict[int, list[int]]:
    """size in bytes -> the fingerprint of the library's allreduce of that size on
    ``comm``: every rank's hash of its whole result (sizes under 8 bytes are left out).
    Inputs differ per element and rank, and the hash weighs every element, so algorithms
    that combine any block in another order, on any rank, differ (at p = 2 ring, tree and
    smp differ from MPICH's default); every rank gets the same."""
    import numpy as np

    from collectives import mpi

    op = mpi.Op.Create(_mix, commute=True)  # a lie: the result shows the algorithm
    found = {}
    try:
        for size in sizes:
            n = size // 8
            if n < 1:
                continue
            index = np.arange(n, dtype=np.uint64)
            mine = index * np.uint64(comm.Get_size()) + np.uint64(comm.Get_rank() + 7)
            result = np.empty_like(mine)
            comm.Allreduce(mine, result, op)
            weights = index * np.uint64(2654435761) + np.uint64(1)  # Knuth's multiplier
            digest = int((result * weights).sum() % np.uint64(_FINGERPRINT_MODULUS))
            found[size] = comm.allgather(digest)
    finally:
        op.Free()
    return found
