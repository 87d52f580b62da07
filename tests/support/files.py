"""Input files as careless or hostile users leave them: platforms, segments, tables."""

from __future__ import annotations

import json
import mmap
import os
import time

from osu_dl_bench.commands import clean
from osu_dl_bench.model.platform import shipped_platforms


def write_file(path, content):
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def platform_json():
    return json.loads(shipped_platforms()["ib-edr100"].read_text())


HOUR_AGO = time.time() - 3600


def fake_segment(directory, name="mpich_shm_deadbeef_0", mtime=HOUR_AGO):
    """A file shaped like a segment MPICH left behind: ours, a page long, an hour old."""
    path = directory / name
    path.write_bytes(b"\0" * mmap.PAGESIZE)
    os.utime(path, (mtime, mtime))
    return path


def stale_names(directory):
    return [s.path.name for s in clean.stale_segments(directory, os.getuid(), min_age_s=60)]
