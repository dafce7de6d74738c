"""The progress bar and the log share a stream without gluing lines together."""

import io

import structlog

from jobledger.infra.progress import ProgressBar, end_progress_line


def test_a_log_line_during_a_progress_bar_starts_a_line_of_its_own() -> None:
    """If a log entry is written while a progress bar's line is open, then the entry
    starts on a new line, the bar goes on below it, and finish ends the line once."""
    stream = io.StringIO()
    logger = structlog.wrap_logger(
        structlog.PrintLogger(stream),
        processors=[end_progress_line, structlog.processors.KeyValueRenderer()],
    )
    bar = ProgressBar("rebuilding queue", stream=stream, interval=0)
    bar(1, 4)
    logger.info("queue.rebuilt", items=4)
    bar(4, 4)
    bar.finish()
    bar.finish()
    lines = stream.getvalue().split("\n")
    assert lines[0].startswith("\rrebuilding queue [")
    assert lines[1] == "items=4 event='queue.rebuilt'"
    assert lines[2].startswith("\rrebuilding queue [")
    assert "100.0%" in lines[2]
    assert lines[3:] == [""]


def test_a_log_line_after_a_finished_bar_adds_no_blank_line() -> None:
    """If the bar's line was ended, then a later log entry does not end it again."""
    stream = io.StringIO()
    bar = ProgressBar("x", stream=stream, interval=0)
    bar(1, 1)
    bar.finish()
    end_progress_line(None, "info", {})
    assert stream.getvalue().count("\n") == 1
