"""Several sources in one coordinator app (`--config sources.toml`) served by two
workers sharing the app id: the sources are spread over the workers, each source
gets its own readers, completes and audits clean. A bad sources.toml stops the
worker at start with exit code 2 and a message naming the setting."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from local_http import free_port, http_get, wait_until
from processes import ProcessGroup
from test_takeover import (
    audit,
    audit_failure,
    check_epochs_and_seqs,
    expected_values,
    health,
    read_outputs,
    readers_topic,
    serving_epochs,
)

# (name suffix, max_parallelism, connector options)
SOURCES: list[tuple[str, int, dict[str, str]]] = [
    ("a", 2, {"splits": "8", "records_per_split": "150", "rate": "200"}),
    ("b", 3, {"splits": "12", "records_per_split": "50", "rate": "100", "event_interval_ms": "5"}),
    (
        "c",
        1,
        {
            "splits": "5",
            "records_per_split": "80",
            "rate": "150",
            "release_interval_ms": "400",
            "splits_per_release": "2",
        },
    ),
]


def spread(ports: list[int], names: dict[str, str]) -> list[set[str]] | None:
    """The active sources of each worker (from /health) if every source has exactly one."""
    answers = [health(p) for p in ports]
    if any(a is None for a in answers):
        return None
    active = [set(a["active_sources"]) for a in answers if a is not None]
    if set().union(*active) != set(names.values()) or sum(map(len, active)) != len(names):
        return None
    return active


def settled_spread(ports: list[int], names: dict[str, str], settle_s: float = 3.0) -> list[set[str]]:
    """``spread`` once it has stayed the same for ``settle_s`` (the group is not mid-rebalance)."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        first = spread(ports, names)
        if first is not None:
            time.sleep(settle_s)
            if spread(ports, names) == first:
                return first
        time.sleep(0.3)
    raise AssertionError("the sources did not settle on one active worker each within 90 s")


def toml_table(options: dict[str, str]) -> str:
    return "{ " + ", ".join(f'{k} = "{v}"' for k, v in options.items()) + " }"


def sources_toml(app_id: str, names: dict[str, str]) -> str:
    lines = [f'app_id = "{app_id}"', "tick_interval_ms = 100", ""]
    for suffix, parallelism, options in SOURCES:
        lines += [
            "[[source]]",
            f'source = "{names[suffix]}"',
            'connector = "sequence"',
            f"max_parallelism = {parallelism}",
            "session_timeout_ms = 10000",
            f"options = {toml_table(options)}",
            "",
        ]
    return "\n".join(lines)


@pytest.mark.kafka
@pytest.mark.timeout(300)
def test_two_workers_share_three_sources(kafka_bootstrap: str, unique_source: str, tmp_path: Path) -> None:
    names = {suffix: f"{unique_source}-{suffix}" for suffix, _, _ in SOURCES}
    config = tmp_path / "sources.toml"
    config.write_text(sources_toml(f"sluicegate.{unique_source}.app", names))
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    ports = [free_port(), free_port()]
    try:
        workers = [
            group.start(f"worker-{i}", ["coordinator", "--config", str(config), "--web-port", str(port)])
            for i, port in enumerate(ports)
        ]

        # Every source is served by exactly one worker once the group has settled.
        settled_spread(ports, names)
        for name in names.values():
            wait_until(
                lambda n=name: any(serving_epochs(w, n) for w in workers),  # type: ignore[misc]
                30,
                f"a worker to serve {name}",
            )

        outputs: dict[str, list[Path]] = {}
        readers = []
        for suffix, parallelism, options in SOURCES:
            name = names[suffix]
            outputs[name] = [tmp_path / f"{name}-{k}.jsonl" for k in range(parallelism)]
            for k in range(parallelism):
                readers.append(group.reader(name, k, options, outputs[name][k], "--checkpoint-interval-ms", "500"))
        for reader in readers:
            assert reader.wait(150) == 0, f"{reader.name}:\n{reader.tail()}"

        final = spread(ports, names)
        assert final is not None, "a source lost its active worker"
        # Whether both workers got sources is test_the_sources_are_spread_over_the_workers.
        print(f"sources per worker: {[sorted(s) for s in final]}")

        for suffix, _, options in SOURCES:
            name = names[suffix]
            splits, per_split = int(options["splits"]), int(options["records_per_split"])
            counts = read_outputs(outputs[name])
            assert set(counts) == expected_values(splits, per_split), f"{name}: values missing or foreign"
            assert max(counts.values()) == 1, f"{name}: a value was read twice without any failure"
            result = audit(kafka_bootstrap, name)
            assert result.ok, f"{name}: {audit_failure(result)}"
            assert result.summary.splits_finished == splits and result.summary.splits_owned == 0
            # One epoch for the whole run: the latest a worker started serving it at. (A source
            # may move once while the group forms, before any reader starts: epochs 1 -> 2.)
            latest = max(e for w in workers for e in serving_epochs(w, name))
            assert result.summary.epochs == [latest], (name, result.summary.epochs, latest)
            check_epochs_and_seqs(readers_topic(kafka_bootstrap, name))
            # the worker serving it says so, and the other answers 404
            status = [http_get(port, f"/sources/{name}")[0] for port in ports]
            assert sorted(status) == [200, 404], (name, status)
    finally:
        group.stop_all()


@pytest.mark.kafka
@pytest.mark.timeout(180)
def test_the_sources_are_spread_over_the_workers(kafka_bootstrap: str, unique_source: str, tmp_path: Path) -> None:
    names = {suffix: f"{unique_source}-{suffix}" for suffix, _, _ in SOURCES}
    config = tmp_path / "sources.toml"
    config.write_text(sources_toml(f"sluicegate.{unique_source}.app", names))
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    ports = [free_port(), free_port()]
    try:
        for i, port in enumerate(ports):
            group.start(f"worker-{i}", ["coordinator", "--config", str(config), "--web-port", str(port)])
        final = settled_spread(ports, names)
        print(f"sources per worker: {[sorted(s) for s in final]}")
        assert all(final), f"the sources were not spread over the two workers: {final}"
    finally:
        group.stop_all()


# -- bad sources.toml ---------------------------------------------------------------------

BAD_CONFIGS = [
    # (what is wrong, the toml, text the error must name)
    (
        "wrong type",
        '[[source]]\nsource = "x1"\nconnector = "sequence"\nmax_parallelism = "four"\n',
        "source[0].max_parallelism",
    ),
    (
        "unknown setting in a source",
        '[[source]]\nsource = "x1"\nconnector = "sequence"\nmax_parallelism = 2\nsesion_timeout_ms = 5\n',
        "source[0].sesion_timeout_ms",
    ),
    (
        "missing setting",
        '[[source]]\nsource = "x1"\nconnector = "sequence"\n\n[[source]]\nsource = "x2"\n',
        "source[0].max_parallelism",
    ),
    (
        "bad connector option",
        '[[source]]\nsource = "x1"\nconnector = "sequence"\nmax_parallelism = 2\noptions = { splits = "0" }\n',
        "'splits'",
    ),
    (
        "unknown connector",
        '[[source]]\nsource = "x1"\nconnector = "nope"\nmax_parallelism = 2\n',
        "'connector'",
    ),
    (
        "unknown top-level setting",
        'webport = 1\n[[source]]\nsource = "x1"\nconnector = "sequence"\nmax_parallelism = 1\n',
        "'webport'",
    ),
    (
        "duplicate source",
        '[[source]]\nsource = "x1"\nconnector = "sequence"\nmax_parallelism = 1\n'
        '[[source]]\nsource = "x1"\nconnector = "sequence"\nmax_parallelism = 2\n',
        "'sources'",
    ),
    ("not TOML", "[[source]\nsource = x1\n", "'--config'"),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("problem", "text", "named"), BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_a_bad_sources_toml_fails_at_start_naming_the_setting(
    tmp_path: Path, problem: str, text: str, named: str
) -> None:
    config = tmp_path / "sources.toml"
    config.write_text(text)
    # An address nobody listens on: the settings must fail before anything connects.
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1", COLUMNS="200")
    done = subprocess.run(
        [sys.executable, "-m", "sluicegate", "coordinator", "--config", str(config)],
        capture_output=True,
        env=env,
        timeout=60,
    )
    err = done.stderr.decode(errors="replace")
    assert done.returncode == 2, f"{problem}: exit {done.returncode}\n{err}\n{done.stdout.decode()}"
    assert named in err, f"{problem}: the error does not name {named}:\n{err}"
    assert "Traceback" not in err, err
