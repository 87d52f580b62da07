"""Allow ``python -m osu_dl_bench``."""

from osu_dl_bench.cli import main

raise SystemExit(main())
