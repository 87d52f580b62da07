"""The JSON Schemas of the suite's input files (package data, checked with jsonschema,
Draft 2020-12), and their first problem in words: the field's path, what was expected
(the failing schema's ``description``) and what came.

Checks that need the registry or relate several fields (a range starting where the
previous one ends) stay with the loaders, in code.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from osu_dl_bench.jsonfile import describe, is_count

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError


def _whole_number(checker: Any, instance: Any) -> bool:
    # Drafts 6+ take 8.0 as an integer; a count in these files is written as 8, and
    # true is no count either.
    return is_count(instance)


@cache
def schema_validator() -> Any:
    """Draft 2020-12's validator, with the integer of these files (_whole_number)."""
    # At first use: every rank of a job imports this module, most never check a file.
    from jsonschema import Draft202012Validator, validators

    return validators.extend(
        Draft202012Validator,
        type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _whole_number),
    )


@cache
def load_schema(package: str, name: str) -> Any:
    """The schema ``schemas/NAME`` shipped in ``package``, checked against its meta-schema."""
    text = resources.files(package).joinpath("schemas", name).read_text(encoding="utf-8")
    schema = json.loads(text)
    validator = schema_validator()
    validator.check_schema(schema)
    return validator(schema)


def first_problem(validator: Any, data: Any) -> tuple[str, str] | None:
    """(where, problem) of the first place ``data`` breaks the schema, or None."""
    error = next(validator.iter_errors(data), None)
    return None if error is None else problem_in_words(error, validator.schema)


def field_path(parts: Iterable[str | int]) -> str:
    """['entries', 0, 'nprocs'] -> 'entries[0].nprocs'; nothing -> '(top level)'."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def problem_in_words(error: ValidationError, root: Any) -> tuple[str, str]:
    """(where, 'expected WHAT, got WHAT') of one jsonschema error."""
    path = list(error.absolute_path)
    if error.validator == "required":
        missing = next(k for k in error.validator_value if k not in error.instance)
        field = _resolve(root, error.schema.get("properties", {}).get(missing, {}))
        return field_path([*path, missing]), f"expected {_expected(field, error)}, got nothing"
    return field_path(path), f"expected {_expected(error.schema, error)}, got {_got(error)}"


def _resolve(root: Any, schema: Any) -> Any:
    """A subschema that is only a local reference ('#/$defs/link'): the one it names."""
    ref = schema.get("$ref", "") if isinstance(schema, dict) else ""
    if "description" in schema or not ref.startswith("#/"):
        return schema
    for part in ref[2:].split("/"):
        root = root[part]
    return root


def _expected(schema: Any, error: ValidationError) -> str:
    if isinstance(schema, dict) and schema.get("description"):
        return schema["description"]
    # Every field of the shipped schemas has a description; this is the fallback.
    return f"a value that passes {error.validator} {describe(error.validator_value)}"


def _got(error: ValidationError) -> str:
    return "an empty list" if error.instance == [] else describe(error.instance)
