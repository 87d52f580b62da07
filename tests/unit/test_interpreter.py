"""support.interpreter, the one way tests run code in a fresh Python: its output back, a
failure that shows the code's stderr, and a hard timeout that stops it."""

from __future__ import annotations

import time

import pytest
from support.interpreter import python_json, run_python


def test_the_fresh_interpreter_gives_its_output_and_its_last_line_as_json(tmp_path):
    code = "import json, os, sys; print('x'); print(json.dumps([os.getcwd(), sys.argv[1:]]))"
    assert run_python(code, "a").stdout.startswith("x\n")
    assert python_json(code, cwd=tmp_path) == [str(tmp_path), []]


def test_a_failing_interpreter_fails_the_test_with_its_stderr():
    with pytest.raises(AssertionError, match="exit 3\nwhy"):
        run_python("import sys; print('why', file=sys.stderr); raise SystemExit(3)")


def test_a_hanging_interpreter_is_stopped_at_its_timeout():
    start = time.monotonic()
    with pytest.raises(AssertionError, match="did not finish within 1 s"):
        run_python("import time; time.sleep(600)", timeout=1)
    assert time.monotonic() - start < 60
