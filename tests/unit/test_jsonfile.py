"""JSON's types in words: one vocabulary (jsonfile.TYPE_NAMES) for every reader's
messages, the run directory's metadata and the schema-checked input files alike."""

from __future__ import annotations

import json

import pytest

from osu_dl_bench.errors import UsageError
from osu_dl_bench.jsonfile import NULL, describe, is_count, kind_text, type_name
from osu_dl_bench.measurement.store import RunStore

WORDS = [
    ({"a": 1}, "an object"),
    ([1], "a list"),
    ("x", "a string"),
    (True, "true or false"),
    (5, "a whole number"),
    (2.5, "a number"),
    (None, "null"),
]


@pytest.mark.parametrize(("value", "words"), WORDS)
def test_each_json_type_has_one_name(value, words):
    assert type_name(value) == words


def test_a_kind_is_named_as_its_values_are():
    assert kind_text(list) == type_name([]) and kind_text(dict) == type_name({})
    assert kind_text((str, NULL)) == "a string or null"
    assert describe([1, 2]) == "a list" and describe({}) == "an object"


def test_a_count_is_a_whole_number_and_true_is_none():
    assert is_count(3) and not is_count(True) and not is_count(3.0)


@pytest.mark.parametrize(("value", "words"), [w for w in WORDS if w[1] != "an object"])
def test_a_run_directory_names_a_wrong_value_in_the_same_words(tmp_path, value, words):
    (tmp_path / "metadata.json").write_text(json.dumps({"jobs": value}))
    with pytest.raises(UsageError, match=f"jobs: expected an object, got {words}\\)"):
        RunStore(tmp_path).read_metadata()
