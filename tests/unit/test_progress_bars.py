"""The two progress bars (tqdm): the sweep's points done / total with elapsed time and ETA,
redrawn on a terminal and written as rate-limited lines elsewhere; training's steps and
loss, drawn on rank 0 only, on a terminal unless asked for."""

import io

from osu_dl_bench.jobs.progress import Progress
from osu_dl_bench.train.progress import ProgressBar, progress_enabled


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_the_sweep_bar_redraws_one_line_on_a_terminal():
    out = _Terminal()
    bar = Progress({2: 3, 4: 3}, stream=out)
    assert bar.interactive
    bar.advance()
    bar.replan(4, 1)
    bar.clear()
    out.write("# an ordinary line\n")
    bar.advance()
    bar.close()
    text = out.getvalue()
    assert "\n" not in text.split("# an ordinary line\n")[0]  # redrawn in place until then
    assert text.endswith("   2/4 points  00:00 elapsed  ETA 00:00\n")
    assert text.rstrip("\n").rsplit("\r", 1)[-1].startswith("[############------------]")


def test_the_sweep_bar_writes_a_line_at_most_every_interval_elsewhere():
    now = [0.0]
    out = io.StringIO()
    bar = Progress({2: 4}, stream=out, clock=lambda: now[0], interval=10.0)
    assert not bar.interactive
    bar.show(force=True)
    for _ in range(3):
        now[0] += 4
        bar.advance()  # at 4 s and 8 s (too soon after 0 s), 12 s
    now[0] += 1
    bar.advance()  # the last point: always shown
    bar.close()  # already shown: no second copy
    lines = out.getvalue().splitlines()
    assert [line.split("]")[1].split()[0] for line in lines] == ["0/4", "3/4", "4/4"]
    assert lines[1].endswith("00:12 elapsed  ETA 00:04") and "\r" not in out.getvalue()


def test_the_training_bar_shows_steps_and_loss_and_leaves_no_trace():
    out = io.StringIO()
    bar = ProgressBar(10, enabled=True, stream=out)
    bar.update(3, 0.5)
    bar.update(10, 0.25)
    assert (
        out.getvalue()
        .rsplit("\r", 1)[-1]
        .startswith("[##############################] 10/10 steps, loss 0.2500")
    )
    bar.clear()
    assert out.getvalue().endswith("\r") and not bar._bar.is_open


def test_a_disabled_training_bar_writes_nothing():
    out = io.StringIO()
    bar = ProgressBar(10, enabled=False, stream=out)
    bar.update(5, 1.0)
    bar.clear()
    assert out.getvalue() == ""


def test_the_training_bar_is_rank_0s_on_a_terminal_unless_asked():
    assert progress_enabled("auto", 0, _Terminal())
    assert not progress_enabled("auto", 0, io.StringIO())
    assert progress_enabled("on", 0, io.StringIO())
    assert not progress_enabled("on", 1, _Terminal())
    assert not progress_enabled("off", 0, _Terminal())


def test_a_terminal_that_reports_no_size_still_shows_both_bars(monkeypatch, capsys):
    import sys

    import tqdm.std

    # What a pseudo-terminal without a window size reports; tqdm hides bars past it.
    monkeypatch.setattr(tqdm.std, "_screen_shape_wrapper", lambda: lambda fp: (-1, -1))
    sweep = Progress({2: 2}, stream=sys.stderr, interactive=True)
    sweep.advance()
    sweep.close()
    train = ProgressBar(4, enabled=True, stream=sys.stderr)
    train.update(4, 0.5)
    err = capsys.readouterr().err
    assert "1/2 points" in err and "4/4 steps, loss 0.5000" in err
