"""Every command's --help reads right: flags take no value, groups name all their commands, no text is lost."""

from __future__ import annotations

import re
from typing import Any

import pytest
from rich.markup import render
from typer.core import TyperGroup
from typer.main import get_command
from typer.testing import CliRunner

from mldiag.cli.main import build

runner = CliRunner()
WIDE = {"COLUMNS": "400"}  # wide enough that nothing wraps, so what is left on a line is the text's own


def _commands(group: TyperGroup, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every command and group under ``group``, by its words on the command line."""
    found: list[tuple[tuple[str, ...], Any]] = [(path, group)]
    for name, command in group.commands.items():
        if isinstance(command, TyperGroup):
            found += _commands(command, (*path, name))
        else:
            found.append(((*path, name), command))
    return found


ROOT = get_command(build())
COMMANDS = _commands(ROOT)
GROUPS = [(path, command) for path, command in COMMANDS if isinstance(command, TyperGroup)]


def _help(path: tuple[str, ...]) -> str:
    result = runner.invoke(build(), [*path, "--help"], env=WIDE)
    assert result.exit_code == 0, result.output
    return result.stdout


def _panel(shown: str, title: str) -> list[str]:
    """The rows of a help panel (``Options``, ``Commands``), without its borders."""
    lines = shown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"╭─ {title} "))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("╰"))
    return [line.strip("│").rstrip() for line in lines[start + 1:end]]


def test_the_walk_covers_the_app():
    assert len(COMMANDS) > 30
    assert ("profiler-session", "capture") in {path for path, _ in COMMANDS}


@pytest.mark.parametrize("path", [path for path, _ in COMMANDS], ids=" ".join)
def test_no_flag_looks_like_it_takes_a_value(path):
    shown = _help(path)
    assert "<bool>" not in shown
    (row,) = [row for row in _panel(shown, "Options") if row.split()[:1] == ["--help"]]
    assert row.split() == ["--help", "Show", "this", "message", "and", "exit."]


@pytest.mark.slow
@pytest.mark.parametrize("path", [path for path, _ in COMMANDS], ids=" ".join)
def test_no_word_is_lost_before_a_full_stop(path):
    assert not re.search(r"\w \.(\s|$)", _help(path))


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[" ".join(path) for path, _ in COMMANDS])
def test_option_help_survives_rich_markup(path, command):
    for param in command.params:
        text = getattr(param, "help", None) or ""
        assert render(text).plain == text, f"{' '.join(path)} {param.name}: {text!r}"


@pytest.mark.parametrize(("path", "group"), GROUPS, ids=[" ".join(path) or "mldiag" for path, _ in GROUPS])
def test_each_command_is_one_line_in_its_groups_list(path, group):
    rows = _panel(_help(path), "Commands")
    assert [row.split()[0] for row in rows] == list(group.commands)


@pytest.mark.parametrize(("path", "group"), [(p, g) for p, g in GROUPS if p], ids=[" ".join(p) for p, _ in GROUPS if p])
def test_a_groups_help_names_every_command(path, group):
    named = re.findall(r"[\w-]+", group.help.split(":", 1)[1])
    assert named == list(group.commands)


@pytest.mark.parametrize("path", [path for path, _ in COMMANDS], ids=" ".join)
def test_at_80_columns_no_option_name_is_cut(path):
    shown = runner.invoke(build(), [*path, "--help"], env={"COLUMNS": "80"}).stdout
    assert not re.findall(r"--[\w-]*…", shown), shown
