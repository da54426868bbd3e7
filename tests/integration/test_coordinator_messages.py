"""What coordinator workers say through a normal life, as real processes over real Kafka
(issue 24 item 3): no ERROR line for a normal start, "serving ... from its beginning", a
standby that says it is one and what it watches, and a bounded source's end announced
with why the coordinator stays up."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from local_http import free_port
from processes import Proc, ProcessGroup

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

OPTIONS = {"splits": "2", "records_per_split": "20"}


def worker_args(source: str, port: int) -> list[str]:
    return [*ProcessGroup.coordinator_args(source, 1, OPTIONS), "--web-port", str(port)]


def error_lines(proc: Proc) -> list[str]:
    return [line for line in proc.log().splitlines() if "ERROR" in line]


def wait_for_any(procs: list[Proc], text: str, timeout_s: float) -> Proc:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for proc in procs:
            if text in proc.log():
                return proc
        time.sleep(0.2)
    raise AssertionError(f"no worker logged {text!r}:\n" + "\n".join(p.tail(15) for p in procs))


def test_a_coordinator_life_in_words_a_person_can_act_on(
    kafka_bootstrap: str, unique_source: str, tmp_path: Path
) -> None:
    source = unique_source
    group = ProcessGroup(tmp_path, kafka_bootstrap)
    try:
        first = group.start("worker-0", worker_args(source, free_port()))
        first.wait_for_log("is serving", timeout_s=90)
        assert f"is serving sluicegate.{source}.coordinator from its beginning" in " ".join(first.log().split())
        second = group.start("worker-1", worker_args(source, free_port()))
        standby = wait_for_any([first, second], f"this worker is a standby for source {source}:", timeout_s=90)
        said = " ".join(standby.log().split())
        assert "another worker coordinates it" in said and "when the group gives it to this worker" in said
        assert f"sluicegate.{source}.coordinator-state" in said  # what it watches (fast takeover is on)

        reader = group.reader(source, 0, OPTIONS, tmp_path / "out.jsonl")
        assert reader.wait(120) == 0, reader.tail()
        finished = wait_for_any([first, second], f"source {source} is finished", timeout_s=60)
        assert "stays up" in " ".join(finished.log().split())
        for worker in (first, second):
            assert error_lines(worker) == [], f"{worker.name} logged ERROR at a normal start:\n{worker.tail()}"
    finally:
        group.stop_all()
