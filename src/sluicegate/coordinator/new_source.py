"""What a source's first start checks before anything is committed: that the inputs it
reads exist (a topic or a path that does not is more likely a typo than on its way).

Every host that starts a source for the first time asks here, before its coordinator
commits the source's definition (a definition committed with the typo would refuse the
corrected one): a deployed coordinator for each of its sources (faust_app.py), and the
coordinator a reader or a Spark query runs itself (embedded.py). A source that ran
before is not checked: an input gone since is its enumerator's to handle. The
connector's own option waits instead (``missing_topics=wait``), and a data cluster that
never answers fails the same way, within ``INPUT_WAIT_S``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from sluicegate.api.errors import SourceError
from sluicegate.api.source import INPUT_WAIT_S
from sluicegate.connectors import load_source


async def check_new_source_inputs(
    source: str, connector: str, options: Mapping[str, str], wait_s: float = INPUT_WAIT_S
) -> None:
    """SourceError naming ``source`` if its inputs are still missing after ``wait_s``."""
    checked = load_source(connector, options)
    try:
        await asyncio.to_thread(checked.check_inputs, wait_s)
    except SourceError as exc:
        raise SourceError(f"source {source}: {exc}") from None
