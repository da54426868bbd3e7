"""Every command's ``--help`` reads whole in an 80-column terminal (issue 24 item 5).

Rich's help panels fit the table to the width by cutting cells ("--checkpoint-in…",
"SLUICEGATE_KAFKA_SECURITY_PROT…"); the CLI uses click's layout, which wraps instead.
Walks the whole command tree, so a new command or option is checked without a new test.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import sluicegate
from sluicegate.cli import app

WIDTH = 80


def commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from commands(sub, (*path, name))


TREE = list(commands(typer.main.get_command(app)))


def test_the_tree_has_every_command() -> None:
    names = {" ".join(path) for path, _ in TREE}
    expected = {"coordinator", "reader", "audit", "acls", "demo", "broker start", "topics apply", "source redefine"}
    assert expected <= names


@pytest.mark.parametrize(("path", "command"), TREE, ids=[" ".join(p) or "sluicegate" for p, _ in TREE])
def test_help_fits_80_columns_without_cutting_anything(path: tuple[str, ...], command: Any) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(WIDTH)}, terminal_width=WIDTH)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines and lines[0].startswith("Usage: ")
    too_wide = [line for line in lines if len(line) > WIDTH]
    assert not too_wide, f"wider than {WIDTH} columns:\n" + "\n".join(too_wide)
    cut = [line for line in lines if "…" in line]
    assert not cut, "cut short:\n" + "\n".join(cut)


@pytest.mark.parametrize(("path", "command"), TREE, ids=[" ".join(p) or "sluicegate" for p, _ in TREE])
def test_every_option_says_what_it_is(path: tuple[str, ...], command: Any) -> None:
    silent = [
        param.name
        for param in command.params
        if getattr(param, "param_type_name", "") == "option" and not (getattr(param, "help", None) or "").strip()
    ]
    assert not silent, f"sluicegate {' '.join(path)}: options without help text: {silent}"


def test_a_misspelled_option_fails_naming_it_and_the_closest_known_one() -> None:
    result = CliRunner().invoke(
        app,
        [
            "reader",
            "--source",
            "s",
            "--subtask",
            "0",
            "--connector",
            "sequence",
            "--output",
            "jsonl:x",
            "--kafka-wait",
            "3",
        ],
    )
    assert result.exit_code == 2
    said = " ".join(result.output.split())
    assert "No such option: --kafka-wait" in said and "--kafka-wait-s" in said, said


def test_a_misspelled_processing_option_of_the_reader_names_the_right_one() -> None:
    args = ["reader", "--source", "s", "--subtask", "0", "--connector", "sequence", "--output", "kafka:x"]
    result = CliRunner().invoke(app, [*args, "--on-proces-error", "skip"])
    assert result.exit_code == 2
    said = " ".join(result.output.split())
    assert "No such option: --on-proces-error" in said and "--on-process-error" in said, said
    result = CliRunner().invoke(app, [*args, "--output-format", "envelop"])
    assert result.exit_code == 2
    said = " ".join(result.output.split())
    assert "--output-format" in said and "must be record or envelope, got 'envelop'" in said, said


def test_a_bad_coordinator_mode_of_the_reader_fails_naming_it() -> None:
    args = ["reader", "--source", "s", "--subtask", "0", "--connector", "sequence", "--output", "kafka:x"]
    args += ["--bootstrap-servers", "127.0.0.1:9"]  # checked first; nothing connects before the mode
    result = CliRunner().invoke(app, [*args, "--coordinator", "embeded"])
    assert result.exit_code == 2
    said = " ".join(result.output.split())
    assert "--coordinator" in said and "must be auto, embedded or external, got 'embeded'" in said, said
    result = CliRunner().invoke(app, [*args, "--coordinator", "auto", "--max-parallelism", "0"])
    assert result.exit_code == 2
    said = " ".join(result.output.split())
    assert "--max-parallelism" in said and "must be >= 1" in said, said


def test_version_prints_the_installed_version_and_runs_no_command() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == f"sluicegate {sluicegate.__version__}\n"
