"""Code run in a fresh Python interpreter (``python -c CODE``): what a new process sees
that this one cannot show, such as which modules an import loads, or the package as a
wheel installs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from mpirun import REPO, run_with_timeout


def run_python(
    code: str,
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path = REPO,
    timeout: float = 120,
) -> subprocess.CompletedProcess:
    """``python -c CODE ARGS`` as a job of its own with a hard timeout (``env``: the whole
    environment, None: this one's); fails with its stderr unless it exits 0."""
    done = run_with_timeout([sys.executable, "-c", code, *args], timeout, env, cwd)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stderr[-3000:]}"
    return done


def python_json(code: str, **kwargs: Any) -> Any:
    """run_python's last line of output, parsed as JSON."""
    return json.loads(run_python(code, **kwargs).stdout.splitlines()[-1])
