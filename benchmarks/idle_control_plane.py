#!/usr/bin/env python
"""What an idle source costs the broker: requests per second by API and client, and the
broker's CPU, while a coordinator and its readers have nothing to read.

    python benchmarks/idle_control_plane.py [--readers 2] [--settle 30] [--window 15] [--rounds 3]

What runs, all on 127.0.0.1:

- a local Kafka broker of its own (``LocalKafkaBroker`` in a temporary directory, full JIT as
  the benchmarks' brokers), with Kafka's request logger at DEBUG: every request it completes
  is one line (API, client id, transactional id) in ``requests.log``;
- one coordinator process (``sluicegate coordinator``) and ``--readers`` reader processes
  (``sluicegate reader``, output ``jsonl``) of a ``files`` source on an empty directory, with
  discovery every second: an unbounded source that finds nothing.

After ``--settle`` seconds (the processes start, register, and the broker's JIT warms up), it
samples the broker's CPU time (user + system, from /proc through psutil) over ``--rounds``
windows of ``--window`` seconds and prints each window's cores, then the requests per second
of the last window by API and client (client and transactional ids with their numbers and
hex ids folded to ``#``). Why: the broker shares the cores of a one-machine Spark job, and a
control plane that keeps it busy while nothing happens takes that CPU from the job
(benchmarks/README.md, "file_source.py", where the gap went).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from sluicegate.devtools.broker.local import LocalKafkaBroker

API_NAMES = {
    0: "Produce",
    1: "Fetch",
    2: "ListOffsets",
    3: "Metadata",
    8: "OffsetCommit",
    9: "OffsetFetch",
    10: "FindCoordinator",
    11: "JoinGroup",
    12: "Heartbeat",
    14: "SyncGroup",
    18: "ApiVersions",
    22: "InitProducerId",
    24: "AddPartitionsToTxn",
    25: "AddOffsetsToTxn",
    26: "EndTxn",
    27: "WriteTxnMarkers",
    28: "TxnOffsetCommit",
    63: "BrokerHeartbeat",
}
REQUEST_LOG_CONFIG = """
log4j.appender.requests=org.apache.log4j.FileAppender
log4j.appender.requests.File={path}
log4j.appender.requests.layout=org.apache.log4j.PatternLayout
log4j.appender.requests.layout.ConversionPattern=%m%n
log4j.logger.kafka.request.logger=DEBUG, requests
log4j.additivity.kafka.request.logger=false
"""
_REQUEST = re.compile(r'"requestApiKey":(\d+).*?"clientId":"([^"]*)"')
_TRANSACTIONAL_ID = re.compile(r'"transactionalId":"([^"]*)"')
_NUMBERS = re.compile(r"[0-9a-f]{8,}|\d+")


def requests_by_client(lines: list[str]) -> collections.Counter[tuple[str, str]]:
    """(API, client) -> requests, ids folded so that readers and attempts count together."""
    count: collections.Counter[tuple[str, str]] = collections.Counter()
    for line in lines:
        request = _REQUEST.search(line)
        if request is None:
            continue
        client = _NUMBERS.sub("#", request.group(2))
        transactional = _TRANSACTIONAL_ID.search(line)
        if transactional is not None:
            client += " txn=" + _NUMBERS.sub("#", transactional.group(1))
        api = int(request.group(1))
        count[(API_NAMES.get(api, str(api)), client)] += 1
    return count


def start_processes(args: argparse.Namespace, bootstrap: str, work: Path) -> list[subprocess.Popen[bytes]]:
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=bootstrap, SLUICEGATE_LOG_LEVEL="WARNING")
    data = work / "data"
    data.mkdir()
    source, parallelism = "idle", str(args.readers)
    options = ["-o", f"path={data}", "-o", "format=jsonl", "-o", "discovery_interval_ms=1000"]
    cli = [sys.executable, "-m", "sluicegate"]
    subprocess.run(
        [*cli, "topics", "apply", "--source", source, "--max-parallelism", parallelism],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    coordinator = [*cli, "coordinator", "--source", source, "--connector", "files", "--max-parallelism", parallelism]
    commands = [coordinator + options]
    for subtask in range(args.readers):
        output = f"jsonl:{work / f'out-{subtask}.jsonl'}"
        reader = [*cli, "reader", "--source", source, "--subtask", str(subtask), "--connector", "files"]
        commands.append([*reader, "--output", output, *options])
    return [
        subprocess.Popen(command, env=env, stdout=(work / f"process-{n}.log").open("wb"), stderr=subprocess.STDOUT)
        for n, command in enumerate(commands)
    ]


def measure(args: argparse.Namespace, broker_pid: int, request_log: Path) -> list[str]:
    """Each window's cores printed; the last window's request lines returned."""
    broker = psutil.Process(broker_pid)
    lines: list[str] = []
    for window in range(args.rounds):
        before_cpu = sum(broker.cpu_times()[:2])
        seen = len(request_log.read_text(errors="replace").splitlines())
        time.sleep(args.window)
        cores = (sum(broker.cpu_times()[:2]) - before_cpu) / args.window
        lines = request_log.read_text(errors="replace").splitlines()[seen:]
        rate = len(lines) / args.window
        print(f"window {window + 1}: broker CPU {cores:.3f} cores, {rate:.0f} requests/s", flush=True)
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--readers", type=int, default=2)
    parser.add_argument("--settle", type=float, default=30.0, help="seconds before the first window")
    parser.add_argument("--window", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--top", type=int, default=15, help="how many (API, client) rows to print")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sluicegate-idle-") as tmp:
        work = Path(tmp)
        request_log = work / "requests.log"
        broker = LocalKafkaBroker(
            run_dir=work / "broker", die_with_parent=True, log4j_extra=REQUEST_LOG_CONFIG.format(path=request_log)
        )
        bootstrap = broker.start(timeout_s=180)
        processes: list[subprocess.Popen[bytes]] = []
        try:
            processes = start_processes(args, bootstrap, work)
            print(f"an idle files source: 1 coordinator, {args.readers} readers; settling {args.settle:.0f} s")
            time.sleep(args.settle)
            pid = broker.status().pid
            assert pid is not None, "the broker is not running"
            lines = measure(args, pid, request_log)
            print(f"\nrequests/s in the last window, by API and client (of {len(lines) / args.window:.0f}/s):")
            for (api, client), n in requests_by_client(lines).most_common(args.top):
                print(f"{n / args.window:8.1f}  {api:18s} {client}")
        finally:
            for process in processes:
                process.kill()
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
