"""Tables: identifiers stay whole in a narrow terminal, a pipe gets whole lines, cells are text."""

from __future__ import annotations

import io

from rich.console import Console

from mldiag.cli.output import Column, Format, show

RUN_IDS = ["ec671974-0059-4b1e-8d3a-2c9f8e1a7b60", "0f3e2d1c-aaaa-4bbb-8ccc-123456789abc"]
LONG_NAME = "a display name long enough that an eighty column table has to fold it somewhere"
SESSION = "projects/local-project/locations/local/machineLearningRuns/ec671974/profilerSessions/s1"
COLUMNS = ("id", Column("displayName"), Column("createTime", "CREATED"), Column("latest.health", "HEALTH"))


def _rows() -> list[dict]:
    return [{"id": run_id, "displayName": LONG_NAME, "createTime": "2026-12-01T22:52:52.123456Z",
             "latest": {"health": "NEEDS_ATTENTION", "session": SESSION}} for run_id in RUN_IDS]


def _terminal(width: int) -> Console:
    return Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None)


def _lines(out: Console) -> list[str]:
    return out.file.getvalue().splitlines()


def test_a_terminal_of_80_columns_folds_other_columns_but_never_an_identifier():
    out = _terminal(80)
    show(_rows(), Format.table, COLUMNS, out=out)
    text = out.file.getvalue()
    assert max(len(line) for line in _lines(out)) <= 80
    assert all(run_id in text for run_id in RUN_IDS)
    assert LONG_NAME not in text and "…" not in text  # folded over lines, nothing cut off


def test_identifiers_stay_whole_even_where_they_alone_overflow_the_terminal():
    out = _terminal(30)
    show(_rows(), Format.table, ("id", Column("latest.session", "SESSION")), out=out)
    text = out.file.getvalue()
    assert all(run_id in text for run_id in RUN_IDS) and SESSION in text


def test_a_pipe_gets_whole_lines_at_any_width():
    out = Console(file=io.StringIO(), width=80)  # what a pipe or a file gets: not a terminal
    assert not out.is_terminal
    show(_rows(), Format.table, (*COLUMNS, Column("latest.session", "SESSION")), out=out)
    lines = _lines(out)
    assert max(len(line) for line in lines) > 80
    assert len(lines) == 2 + 4  # a line per row, and the header with its three rules
    for run_id in RUN_IDS:
        (row,) = [line for line in lines if run_id in line]
        assert LONG_NAME in row and SESSION in row and "2026-12-01T22:52:52.123456Z" in row


def test_headers_read_as_words_and_cells_are_text_not_markup():
    out = Console(file=io.StringIO())
    show([{"id": "s1", "topFinding": "P0 [bold]f32[8,128][/bold] copy"}], Format.table, ("id", "topFinding"), out=out)
    text = out.file.getvalue()
    assert "TOP FINDING" in text and "P0 [bold]f32[8,128][/bold] copy" in text
