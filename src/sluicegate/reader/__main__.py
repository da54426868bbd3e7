"""``python -m sluicegate.reader ...``: the same as ``sluicegate reader ...``."""

import os

import typer

from sluicegate.reader.commands import reader_command, setup_logging

setup_logging(os.environ.get("SLUICEGATE_LOG_LEVEL", "INFO"))
typer.run(reader_command)
