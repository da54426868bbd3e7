"""Control topics on a real 3-node Kafka cluster (issue 49): how often ``apply_topics``
gets through, on fresh sources and while a broker is down, beside the plain admin
requests it used to make once each (no retry), alternating on the same cluster.

1. Fresh sources: ``--sources`` new sources, each one apply (six new topics at RF 3).
   The plain side creates the same kind of topics and reads their configs at once (what
   ``topics apply`` did before: its config read went to a broker that may not know them).
2. Outage: a node is SIGKILLed; for ``--outage-s`` seconds (past its fencing, 9 s) both
   sides take turns on an existing source: ``apply_topics`` against describe-cluster,
   list-topics and describe-configs sent once each.

Prints, per phase and side: attempts, failures (with the errors seen), median and
slowest seconds.

    .venv/bin/python benchmarks/cluster_topics.py --sources 12 --outage-s 15
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import for_code

from sluicegate.devtools.broker.cluster import LocalKafkaCluster
from sluicegate.kafka.topics import apply_topics
from sluicegate.protocol.topics import TopicSpec, topic_specs


class Tally:
    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.errors: collections.Counter[str] = collections.Counter()

    async def run(self, attempt: Callable[[], Awaitable[None]]) -> None:
        began = time.monotonic()
        try:
            await attempt()
        except Exception as exc:
            self.errors[type(exc).__name__ + (f" ({exc})" if "configs" in str(exc) else "")] += 1
        self.seconds.append(time.monotonic() - began)

    def line(self, phase: str, side: str) -> str:
        failed = sum(self.errors.values())
        seen = "; ".join(f"{n}x {e[:90]}" for e, n in self.errors.most_common(3)) or "-"
        return (
            f"{phase:<8} {side:<14} {len(self.seconds):>8} {failed:>8} "
            f"{statistics.median(self.seconds):>9.2f} {max(self.seconds):>9.2f}   {seen}"
        )


async def plain_apply(bootstrap: str, specs: list[TopicSpec], create: bool) -> None:
    """The requests of the old apply, each sent once: what failed in issue 49."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        brokers = len((await admin.describe_cluster())["brokers"])
        await admin.list_topics()
        if create:
            response = await admin.create_topics(
                [NewTopic(s.name, s.partitions, min(3, brokers), topic_configs=s.config) for s in specs]
            )
            for entry in response.to_object()["topic_errors"]:
                if entry["error_code"] not in (0, 36):
                    raise for_code(entry["error_code"])(entry["topic"])
        resources = [ConfigResource(ConfigResourceType.TOPIC, s.name) for s in specs]
        for response in await admin.describe_configs(resources):
            for res in response.to_object()["resources"]:
                if res["error_code"]:
                    raise RuntimeError(f"cannot read the configs: {for_code(res['error_code']).__name__}")
    finally:
        await admin.close()


async def fresh_sources(bootstrap: str, count: int) -> dict[str, Tally]:
    tallies = {"apply_topics": Tally(), "plain requests": Tally()}
    for _ in range(count):
        ours = topic_specs("bench", f"f{uuid.uuid4().hex[:8]}", 4)
        plain = topic_specs("bench", f"p{uuid.uuid4().hex[:8]}", 4)
        await tallies["apply_topics"].run(lambda ours=ours: _applied(bootstrap, ours))
        await tallies["plain requests"].run(lambda plain=plain: plain_apply(bootstrap, plain, create=True))
    return tallies


async def _applied(bootstrap: str, specs: list[TopicSpec]) -> None:
    await apply_topics(bootstrap, specs, timeout_s=30)


async def outage(cluster: LocalKafkaCluster, seconds: float) -> dict[str, Tally]:
    bootstrap = cluster.bootstrap
    existing = topic_specs("bench", f"o{uuid.uuid4().hex[:8]}", 4)
    await apply_topics(bootstrap, existing)
    tallies = {"apply_topics": Tally(), "plain requests": Tally()}
    victim = cluster.node_ids[0]
    cluster.kill(victim)
    killed = time.monotonic()
    try:
        while time.monotonic() - killed < seconds:
            await tallies["apply_topics"].run(lambda: _applied(bootstrap, existing))
            await tallies["plain requests"].run(lambda: plain_apply(bootstrap, existing, create=False))
    finally:
        cluster.restart(victim)
    return tallies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sources", type=int, default=12)
    parser.add_argument("--outage-s", type=float, default=15.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sluicegate-cluster-bench-") as folder:
        cluster = LocalKafkaCluster(Path(folder), nodes=3, die_with_parent=True)
        began = time.monotonic()
        cluster.start()
        print(f"3-node cluster ready in {time.monotonic() - began:.1f} s", flush=True)
        try:
            fresh = asyncio.run(fresh_sources(cluster.bootstrap, args.sources))
            down = asyncio.run(outage(cluster, args.outage_s))
        finally:
            cluster.stop()
    print(f"\n{'phase':<8} {'side':<14} {'attempts':>8} {'failed':>8} {'median s':>9} {'max s':>9}   errors")
    for phase, tallies in (("fresh", fresh), ("outage", down)):
        for side, tally in tallies.items():
            print(tally.line(phase, side))
    return 0


if __name__ == "__main__":
    sys.exit(main())
