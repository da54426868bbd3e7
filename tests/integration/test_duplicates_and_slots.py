"""Elastic readers over real Kafka and real processes (issue 11, items 1, 2 and 4):

- two `sluicegate reader` processes started together for one subtask do not fence each
  other for ever: one stops (exit 3, naming the other), the other keeps reading, for
  both output kinds; with a Kafka output nothing is written twice;
- `--subtask auto` takes free slots; past the last slot it is refused (exit 3); a
  named member SIGKILLed and restarted gets its slot back and restores its checkpoint;
- `sluicegate topics scale` grows a source under a running coordinator, and a reader of
  a new subtask registers and reads without a coordinator restart.
The audit is clean after each.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from kafka_data import FAST_CHECKPOINTS, create_topic
from processes import Proc, ProcessGroup, completed_checkpoints, poll_until, read_topic, readers_messages

from sluicegate.audit.commands import run_audit

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

UNBOUNDED = {"splits": "4", "records_per_split": "unbounded", "rate": "200"}


def registrations(messages: list[dict[str, object]], subtask: int | None = None) -> int:
    return sum(1 for m in messages if m["type"] == "ReaderRegistered" and subtask in (None, m["subtask"]))


async def audit_clean(bootstrap: str, source: str) -> None:
    result = await run_audit(bootstrap, source)
    assert result.ok, "the audit found violations:\n" + "\n".join(map(str, result.violations[:10]))


async def first_exit(procs: list[Proc], timeout_s: float) -> Proc:
    async def exited() -> Proc | None:
        return next((p for p in procs if p.returncode is not None), None)

    found: Proc = await poll_until(exited, timeout_s, "one of the duplicate readers to stop")
    return found


@pytest.mark.parametrize("output_kind", ["jsonl", "kafka"])
async def test_two_readers_started_for_one_subtask_end_with_one(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path, output_kind: str
) -> None:
    procs.coordinator(unique_source, 1, UNBOUNDED)
    out_topic = f"{unique_source}.out"
    if output_kind == "kafka":
        create_topic(kafka_bootstrap, out_topic, 1)
    outputs: list[Path | str] = (
        [f"kafka:{out_topic}"] * 2 if output_kind == "kafka" else [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    )
    readers = [
        procs.start(f"dup-{k}", procs.reader_args(unique_source, 0, UNBOUNDED, outputs[k], *FAST_CHECKPOINTS))
        for k in range(2)
    ]
    loser = await first_exit(readers, 40)
    winner = readers[1 - readers.index(loser)]
    assert loser.returncode == 3, procs.describe()
    assert "two readers were started for the same subtask" in " ".join(loser.log().split()), loser.tail()
    # the survivor keeps reading, and the fight is over: no registration for 3 s (the
    # survivor may register once more first: if its twin had taken the transactional id
    # after it, it takes the id back and restarts from its checkpoint)
    # two checkpoints after its twin stopped: the first transaction after the twin took the
    # id fails, so a survivor that must register again has done so before the second
    at_exit = completed_checkpoints(winner)
    await poll_until(_checkpoints_after(winner, at_exit, 2), 30, "two checkpoints of the survivor")
    settled = registrations(await readers_messages(kafka_bootstrap, unique_source))
    time.sleep(3)
    assert winner.returncode is None, winner.tail()
    messages = await readers_messages(kafka_bootstrap, unique_source)
    assert registrations(messages) == settled <= 4, f"{registrations(messages)} registrations"
    before = completed_checkpoints(winner)
    await poll_until(_checkpoints_after(winner, before, 2), 10, "the survivor's next checkpoints")

    winner.request_stop()
    assert await winner.wait_async(30) == 0, winner.tail()
    await audit_clean(kafka_bootstrap, unique_source)
    if output_kind == "kafka":  # exactly once: every record committed once, none twice
        records = await read_topic(kafka_bootstrap, out_topic)
        values = Counter((r.json()["split_id"], r.json()["value"]) for r in records)
        assert values and max(values.values()) == 1, values.most_common(3)


def _checkpoints_after(proc: Proc, before: int, more: int) -> Callable[[], Awaitable[bool]]:
    """Whether ``proc`` logged ``more`` completed checkpoints after the first ``before``."""

    async def check() -> bool:
        return completed_checkpoints(proc) >= before + more

    return check


async def test_auto_slots_are_handed_out_refused_when_full_and_kept_by_name(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path
) -> None:
    procs.coordinator(unique_source, 2, UNBOUNDED)

    def auto(name: str, *extra: str) -> Proc:
        args = procs.reader_args(unique_source, 0, UNBOUNDED, tmp_path / f"{name}.jsonl", *FAST_CHECKPOINTS, *extra)
        args[args.index("--subtask") + 1] = "auto"
        return procs.start(name, args)

    first, second = auto("pod-a", "--name", "pod-a"), auto("pod-b")
    for reader in (first, second):
        await reader.wait_for_log_async("registered as attempt", timeout_s=40)
    granted = {p.name: _granted(p) for p in (first, second)}
    assert sorted(granted.values()) == [0, 1], granted

    third = auto("pod-c")
    assert await third.wait_async(40) == 3, third.tail()
    assert "all 2 slots" in " ".join(third.log().split()), third.tail()

    # pod-a is killed and comes back at once: same name, same slot, its checkpoint restored
    await first.wait_for_log_async("checkpoint 2:", timeout_s=20)
    first.kill()
    again = auto("pod-a-again", "--name", "pod-a")
    await again.wait_for_log_async("registered as attempt", timeout_s=40)
    assert _granted(again) == granted["pod-a"]
    assert "restored checkpoint" in again.log(), again.tail()
    assert second.returncode is None, second.tail()

    for reader in (again, second):
        reader.request_stop()
        assert await reader.wait_async(30) == 0, reader.tail()
    await audit_clean(kafka_bootstrap, unique_source)


def _granted(proc: Proc) -> int:
    [line] = proc.lines_with("granted subtask")[:1]
    return int(line.split("granted subtask ")[1].split()[0])


async def test_topics_scale_grows_a_source_under_a_running_coordinator(
    kafka_bootstrap: str, unique_source: str, procs: ProcessGroup, tmp_path: Path
) -> None:
    options = {**UNBOUNDED, "splits": "6"}
    coordinator = procs.coordinator(unique_source, 2, options)
    zero = procs.reader(unique_source, 0, options, tmp_path / "r0.jsonl", *FAST_CHECKPOINTS)
    await zero.wait_for_log_async("registered as attempt", timeout_s=40)

    scale = procs.run("scale", ["topics", "scale", "--source", unique_source, "--max-parallelism", "4"])
    assert scale.returncode == 0, scale.tail()
    assert "2 -> 4 subtasks" in scale.log()
    shrink = procs.run("shrink", ["topics", "scale", "--source", unique_source, "--max-parallelism", "3"])
    assert shrink.returncode == 2 and "only grows" in shrink.log(), shrink.tail()

    three = procs.reader(unique_source, 3, options, tmp_path / "r3.jsonl", *FAST_CHECKPOINTS)
    await three.wait_for_log_async("registered as attempt 1", timeout_s=40)
    await three.wait_for_log_async("got ", timeout_s=30)  # splits move to it (grace delay)
    assert coordinator.returncode is None and "is serving" in coordinator.log()
    assert coordinator.log().count("is serving") == 1  # never restarted
    for reader in (zero, three):
        reader.request_stop()
        assert await reader.wait_async(30) == 0, reader.tail()
    messages = await readers_messages(kafka_bootstrap, unique_source)
    assert registrations(messages, 3) == 1
    await audit_clean(kafka_bootstrap, unique_source)
