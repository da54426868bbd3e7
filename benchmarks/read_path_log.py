"""Which read path ``readPath=auto`` chose for a benchmark's query, from the driver's log.

The driver logs the choice once a query run (sluicegate/spark/read_path_choice.py):
``source S: readPath=auto chose jvm: ...``, or, in a session without the JVM read path,
``source S: readPath=auto reads on the Python path (...)``. ``ChoiceLog`` keeps the last
choice of each source, so a benchmark's side on the default path can print what it ran.
"""

from __future__ import annotations

import logging
import re

CHOICE = re.compile(r"source (?P<source>\S+): readPath=auto (?:chose (?P<chosen>\w+)|reads on the Python path)")


class ChoiceLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.by_source: dict[str, str] = {}

    def emit(self, record: logging.LogRecord) -> None:
        found = CHOICE.match(record.getMessage())
        if found:
            self.by_source[found["source"]] = found["chosen"] or "python"

    def chosen(self, source: str) -> str:
        """The path the source's last query took: ``jvm`` or ``python`` ("?" if none was logged)."""
        return self.by_source.get(source, "?")


def install() -> ChoiceLog:
    """A ChoiceLog on sluicegate's Spark logger (the driver's planner logs there)."""
    handler = ChoiceLog()
    logger = logging.getLogger("sluicegate.spark")
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    return handler
