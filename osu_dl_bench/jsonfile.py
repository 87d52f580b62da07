"""Reading the suite's JSON input files (tuning tables, platforms) without trusting them:
every way the file can be unreadable becomes one UnreadableJson with the reason, never a
traceback, and the values that come back are JSON's finite numbers only."""

from __future__ import annotations

import json
import math
import os
import stat
from typing import Any

# Far above any table or platform written (the shipped reference table is 128 KiB), and
# small enough that `--table /dev/zero` fails at once instead of filling memory.
MAX_FILE_BYTES = 64 << 20


# JSON's null, as a kind for is_kind.
NULL = type(None)
# JSON's types in words, the one vocabulary of every message about a JSON value (the
# schemas' descriptions use it too). bool before int: JSON's true is no number.
TYPE_NAMES = {
    dict: "an object",
    list: "a list",
    str: "a string",
    bool: "true or false",
    int: "a whole number",
    float: "a number",
    NULL: "null",
}


class UnreadableJson(ValueError):
    """A file that is no JSON the suite can hold; the message says why."""


def _refuse_constant(name: str) -> Any:
    # Python's json accepts NaN and +-Infinity, which JSON does not define.
    raise UnreadableJson(f"{name} is not a number JSON allows")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise UnreadableJson(f"{text} is not a finite number")
    return value


# read_regular_file's default: MAX_FILE_BYTES as it is when a file is read, not when this
# module was loaded.
SUITE_LIMIT = -1


def read_regular_file(path: str | os.PathLike, limit: int | None = SUITE_LIMIT) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes (default
    MAX_FILE_BYTES; None: any size; UnreadableJson naming why not): the one bounded,
    never-blocking read of the suite's input files."""
    if limit == SUITE_LIMIT:
        limit = MAX_FILE_BYTES
    try:
        # A FIFO or device would block the read forever or never end: regular files only.
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise UnreadableJson("not a regular file")
        # O_NONBLOCK: a FIFO swapped in after the check must not block the open either.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as stream:
            if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
                raise UnreadableJson("not a regular file")
            data = stream.read() if limit is None else stream.read(limit + 1)
    except OSError as exc:
        raise UnreadableJson(f"cannot read: {exc.strerror or exc}") from None
    if limit is not None and len(data) > limit:
        raise UnreadableJson(f"larger than {limit} bytes: not a file of this suite")
    return data


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableJson(
            f"not UTF-8 text: byte {exc.start} is {data[exc.start]:#04x}"
        ) from None


def load_json(path: str | os.PathLike) -> Any:
    """The parsed contents of the JSON file ``path`` (UnreadableJson if there are none)."""
    return parse_json(read_regular_file(path))


def parse_json(data: bytes) -> Any:
    """The parsed contents of a JSON file's bytes (UnreadableJson if there are none)."""
    text = _decode(data)
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise UnreadableJson(
            f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except RecursionError:
        raise UnreadableJson("nested deeper than Python's JSON parser allows") from None
    except UnreadableJson:
        raise
    except ValueError as exc:
        # Python 3.11+ refuses to convert integers of more than 4300 digits.
        if "digits" in str(exc):
            raise UnreadableJson("holds an integer of more than 4300 digits") from None
        raise UnreadableJson(f"not JSON: {exc}") from None


def describe(value: Any) -> str:
    """A short, safe rendering of a JSON value for messages: a scalar as JSON (cut to 60
    characters), a list or object by kind (their contents may be huge or deep)."""
    if isinstance(value, (list, dict)):
        return type_name(value)
    if is_count(value) and abs(value) >= 1 << 100:
        return f"an integer of {value.bit_length()} bits"
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def type_name(value: Any) -> str:
    """A parsed JSON value's type in words: [1] -> 'a list', 5 -> 'a whole number'."""
    names = (name for kind, name in TYPE_NAMES.items() if is_kind(value, kind))
    return next(names, type(value).__name__)


def kind_text(kind: type | tuple) -> str:
    """JSON kinds in words: (str, NULL) -> 'a string or null'."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(TYPE_NAMES[k] for k in kinds)


def is_count(value: Any) -> bool:
    """Whether a parsed JSON value is a whole number (true and false are not)."""
    return is_kind(value, int)


def is_kind(value: Any, kind: type | tuple) -> bool:
    """Whether a parsed JSON value is of ``kind`` (a type or a tuple of types)."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # JSON's true and false are Python ints too: only a bool kind takes them.
    return isinstance(value, kinds) and (bool in kinds or not isinstance(value, bool))
