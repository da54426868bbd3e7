"""A reader pointed at a Kafka that never answers fails fast, naming the setting
(issue 24 item 2): a wrong ``--bootstrap-servers`` must not look like a reader that
waits. It retries for ``--kafka-wait-s`` (a broker still starting), then exits 2 with
what was tried and what to check. A real process, its exit code, its time and its words.
"""

from __future__ import annotations

import socket
from pathlib import Path

from cli_run import run_sluicegate

WAIT_S = 3


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_reader(tmp_path: Path, *extra: str) -> tuple[int, float, str]:
    return run_sluicegate(
        *("reader", "--source", "orders", "--subtask", "0", "--connector", "sequence"),
        *("--output", f"jsonl:{tmp_path / 'out.jsonl'}", "--bootstrap-servers", f"127.0.0.1:{closed_port()}"),
        *extra,
    )


def test_a_kafka_that_never_answers_ends_the_reader_with_exit_2_naming_the_setting(tmp_path: Path) -> None:
    code, took, said = run_reader(tmp_path, "--kafka-wait-s", str(WAIT_S))
    assert code == 2, said
    assert WAIT_S <= took < WAIT_S + 20, f"took {took:.1f} s"
    assert "did not answer" in said and "since start" in said
    assert "--bootstrap-servers" in said and "KAFKA_BOOTSTRAP_SERVERS" in said
    assert "--kafka-wait-s waits longer" in said


def test_the_wait_must_be_positive(tmp_path: Path) -> None:
    code, took, said = run_reader(tmp_path, "--kafka-wait-s", "0")
    assert code == 2, said
    assert took < 20
    assert "--kafka-wait-s" in said and "must be > 0" in said
