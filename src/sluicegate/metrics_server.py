"""Serve one Prometheus registry on ``/metrics`` from the caller's asyncio loop (aiohttp).

Used by the reader host and the Spark driver: their collectors read state that only
their loop touches, so the endpoint runs on that loop rather than in a thread of its own.
"""

from __future__ import annotations

import logging

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger("sluicegate.metrics")


class MetricsServer:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._runner: web.AppRunner | None = None

    async def start(self, port: int, host: str = "0.0.0.0") -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()
        log.info("metrics on http://%s:%d/metrics", host, port)

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
