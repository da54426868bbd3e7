"""Serve one Prometheus registry on ``/metrics`` from the caller's asyncio loop (aiohttp).

Used by the reader host and the Spark driver: their collectors read state that only
their loop touches, so the endpoint runs on that loop rather than in a thread of its own.
The Spark driver also takes its executors' read figures there (``POST /reads``,
spark/read_reports.py), on the same loop as the collector that serves them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger("sluicegate.metrics")


MAX_POST_BYTES = 1 << 20


class MetricsServer:
    def __init__(self, registry: CollectorRegistry, posts: dict[str, Callable[[bytes], bool]] | None = None) -> None:
        """``posts``: path -> handler of a POSTed body (True: taken, else 400)."""
        self.registry = registry
        self._posts = dict(posts or {})
        self._runner: web.AppRunner | None = None

    async def start(self, port: int, host: str = "0.0.0.0") -> None:
        app = web.Application(client_max_size=MAX_POST_BYTES)
        app.router.add_get("/metrics", self._metrics)
        for path, handler in self._posts.items():
            app.router.add_post(path, self._taking(handler))
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()
        log.info("metrics on http://%s:%d/metrics", host, port)

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    @staticmethod
    def _taking(handler: Callable[[bytes], bool]) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def take(request: web.Request) -> web.Response:
            return web.Response(status=204 if handler(await request.read()) else 400)

        return take

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
