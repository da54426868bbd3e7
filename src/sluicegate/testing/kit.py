"""``ConnectorTestKit``: the scenarios every connector must pass, exactly once.

A connector author subclasses it in a test module (the subclass's name starts with
``Test`` so that pytest collects it) and says how to build the source and how to
write test data; the kit owns the scenarios and the checks::

    class TestMyConnector(ConnectorTestKit):
        connector = "my_connector"            # entry-point name, or "package.module:SourceClass"

        def source_options(self, env: KitEnv) -> dict[str, str]:
            return {"path": str(env.directory / "data")}

        def write_data(self, env: KitEnv, batch: int) -> list[Hashable]:
            ...                                # write records; return the key of each one

Every scenario except the real run drives the connector in memory (``MemoryRun``:
the coordinator core and reader sessions with virtual time, no Kafka), and ends by
comparing the keys of the committed output (``record_key``) with what ``write_data``
returned: every record exactly once, nothing else. ``test_real_run`` (marked
``kafka``) runs ``sluicegate coordinator`` and ``sluicegate reader`` processes over the
session's Kafka broker, with a SIGKILL and a coordinator restart, and runs the audit.
"""

from __future__ import annotations

import secrets
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sluicegate.api.reader import Record
from sluicegate.api.source import Boundedness, Source, SupportsSplitReassignmentOnRecovery
from sluicegate.connectors import load_source
from sluicegate.testing.checks import assert_exactly_once, exactly_once_problems
from sluicegate.testing.faults import FAULT_POINTS, EnumeratorFault
from sluicegate.testing.memory_run import MemoryRun, RunConfig


@dataclass
class KitEnv:
    """Where one run of a scenario keeps its test data: a fresh directory and name (use
    the name in topic or table names), and the session's Kafka broker if the subclass's
    ``kit_env`` fixture asked for it."""

    directory: Path
    name: str
    kafka_bootstrap: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    """Anything a subclass's fixture wants to hand to ``source_options``/``write_data``."""

    def fresh(self) -> KitEnv:
        """Another run's environment (hypothesis runs many in one test)."""
        name = f"{self.name.split('.')[0]}.{secrets.token_hex(3)}"
        directory = self.directory / name
        directory.mkdir(parents=True, exist_ok=True)
        return replace(self, directory=directory, name=name)


Schedule = list[tuple[int, str, int]]
"""(rounds before the event, event, subtask) for ``test_random_failures``."""

EVENTS = ("kill_reader", "kill_reader_for_long", "restart_coordinator", "global_restore")


class ConnectorTestKit(ABC):
    """Subclass it in a module of tests; see the module docstring."""

    connector: ClassVar[str]
    """What ``sluicegate.connectors.load_source`` (and ``--connector``) is given."""
    parallelism: ClassVar[int] = 2
    run_config: ClassVar[RunConfig] = RunConfig()
    """Pace of the in-memory runs (``parallelism`` above wins)."""
    writes_while_running: ClassVar[bool] = True
    """Whether ``write_data(env, batch)`` with batch >= 1, called while the source runs,
    adds data in new splits (a new partition, file or key range) that the enumerator
    discovers. False for a source that reads a fixed snapshot."""
    random_schedules: ClassVar[int] = 15
    """Hypothesis examples of ``test_random_failures`` (0: skip it)."""
    alignment_drift_ms: ClassVar[int] = 0
    """``max_watermark_drift_ms`` of the alignment scenario."""
    real_run_records_timeout_s: ClassVar[float] = 120.0

    # -- what the connector author provides --------------------------------------------

    @abstractmethod
    def source_options(self, env: KitEnv) -> dict[str, str]:
        """The options of a source that reads what ``write_data`` writes in ``env``."""

    @abstractmethod
    def write_data(self, env: KitEnv, batch: int) -> list[Hashable]:
        """Write test data (batch 0 before the source starts; batch >= 1 while it runs,
        only if ``writes_while_running``), returning the key (``record_key``) of every
        record written. A source that makes its own data returns the keys it will read."""

    def record_key(self, record: Record) -> Hashable:
        """What identifies a record in the output (by default its value)."""
        value: Hashable = record.value
        return value

    def row_key(self, row: Mapping[str, Any]) -> Hashable:
        """``record_key`` of a row of the real run's output (JSON: split_id, value, event_time_ms)."""
        return self.record_key(Record(row["split_id"], row["value"], row.get("event_time_ms")))

    def alignment_options(self, env: KitEnv) -> dict[str, str] | None:
        """Options (added to ``source_options``) under which some splits' event times run
        ahead of others', so that watermark alignment pauses them; None: the connector has
        no event time and the alignment scenario is skipped."""
        return None

    def create_source(self, options: Mapping[str, str]) -> Source[Any]:
        return load_source(self.connector, options)

    def real_run_options(self, env: KitEnv) -> dict[str, str]:
        """Options added for the real run, e.g. a rate that makes reading last a few
        seconds, so that the kills land mid-way."""
        return {}

    def real_run_env(self) -> dict[str, str]:
        """Environment variables the real run's processes need (e.g. PYTHONPATH for a
        connector named ``module:Class`` that is not installed)."""
        return {}

    @pytest.fixture(autouse=True)
    def _close_runs(self) -> Iterator[None]:
        """Every run a scenario opened is closed after it, passed or failed (its
        coordinator's event loop and threads, its readers' connector clients)."""
        yield
        for run in self.__dict__.pop("_runs", []):
            run.close()

    @pytest.fixture
    def kit_env(self, tmp_path: Path) -> KitEnv:
        """Override (keeping the name) to give ``write_data`` a Kafka broker or anything else."""
        return KitEnv(tmp_path, f"kit-{secrets.token_hex(4)}")

    # -- running ----------------------------------------------------------------------

    def open_run(
        self,
        env: KitEnv,
        extra_options: Mapping[str, str] | None = None,
        fault: EnumeratorFault | None = None,
        **config: Any,
    ) -> tuple[MemoryRun, list[Hashable]]:
        """Write batch 0, start the source in memory (its enumerator carrying ``fault``)
        and a reader for every subtask."""
        options = {**self.source_options(env), **(extra_options or {})}
        expected = list(self.write_data(env, 0))
        run_config = replace(self.run_config, parallelism=self.parallelism, **config)

        def make_source() -> Source[Any]:
            source = self.create_source(options)
            return source if fault is None else fault.install(source)

        run = MemoryRun(make_source, run_config, source_name=env.name)
        self.__dict__.setdefault("_runs", []).append(run)
        for subtask in range(self.parallelism):
            run.start_reader(subtask)
        return run, expected

    def keys(self, run: MemoryRun) -> list[Hashable]:
        return [self.record_key(r) for r in run.output]

    def bounded(self, run: MemoryRun) -> bool:
        return run.core.source.boundedness is Boundedness.BOUNDED

    def run_until(self, run: MemoryRun, condition: Callable[[], bool], what: str, expected: list[Hashable]) -> None:
        """As ``run.run_until``, failing with what the output lacks so far."""
        try:
            run.run_until(condition, what)
        except AssertionError as exc:
            problems = exactly_once_problems(self.keys(run), expected)
            raise AssertionError(f"{self.connector}: {exc}\n  output so far: " + "; ".join(problems)) from None

    def finish(self, run: MemoryRun, expected: list[Hashable], scenario: str, failed_steps: int = 0) -> None:
        """Run to the bounded end (or, unbounded, until everything is committed and a few
        checkpoints more), then check the output is exactly the input, and that the
        coordinator's steps failed ``failed_steps`` times (an enumerator that raises is a
        bug even though the coordinator recovers from it)."""
        if self.bounded(run):
            self.run_until(run, run.is_finished, f"{scenario}: the bounded end", expected)
        else:
            want = Counter(expected)
            self.run_until(
                run,
                lambda: not want - Counter(self.keys(run)),
                f"{scenario}: every record committed",
                expected,
            )
            run.run_rounds(3 * run.config.checkpoint_every)  # duplicates would come now
        assert not run.violations, f"{self.connector}, {scenario}: " + "; ".join(run.violations)
        assert_exactly_once(self.keys(run), expected, f"{self.connector}, {scenario}")
        assert len(run.step_failures) == failed_steps, (
            f"{self.connector}, {scenario}: {len(run.step_failures)} coordinator steps raised "
            f"(each restarted the coordinator from its last commit), not {failed_steps}: "
            + "; ".join(run.step_failures)
        )

    # -- scenarios ----------------------------------------------------------------------

    def test_reads_everything_exactly_once(self, kit_env: KitEnv) -> None:
        run, expected = self.open_run(kit_env)
        assert expected, "write_data(env, 0) wrote nothing: the kit needs data to check"
        self.finish(run, expected, "a run without failures")

    def test_reader_failure_before_a_checkpoint(self, kit_env: KitEnv) -> None:
        """A reader dies with records read but no checkpoint of any progress: its splits
        go back to the enumerator, and the records it read are read again, once."""
        run, expected = self.open_run(kit_env)
        self.run_until(
            run,
            lambda: run.committed_by[0] == 0 and bool(run.readers[0].pending),
            "reader 0 reading before its first checkpoint with records",
            expected,
        )
        assert run.kill_reader(0) > 0
        run.start_reader(0)
        self.finish(run, expected, "reader 0 killed before a checkpoint")

    def test_reader_failure_after_a_checkpoint(self, kit_env: KitEnv) -> None:
        """A reader dies after a checkpoint, with records read since: it restarts from
        that checkpoint's positions."""
        run, expected = self.open_run(kit_env)
        self.run_until(
            run,
            lambda: run.committed_by[0] > 0 and bool(run.readers[0].pending),
            "reader 0 with a checkpoint and records read since",
            expected,
        )
        assert run.kill_reader(0) > 0
        run.start_reader(0)
        self.finish(run, expected, "reader 0 killed after a checkpoint")

    @pytest.mark.parametrize("point", FAULT_POINTS)
    def test_an_enumerator_step_that_raises_is_all_or_nothing(self, kit_env: KitEnv, point: str) -> None:
        """The enumerator raises once, right after ``point`` did its work (assigned splits,
        changed its state): nothing of that step may survive, the coordinator restarts
        from its last commit and is offered the same input again, and the output is still
        exactly the input."""
        fault = EnumeratorFault(point)
        run, expected = self.open_run(kit_env, fault=fault)
        if point == "add_splits_back":  # only a reader failure gives splits back
            self.run_until(run, lambda: bool(run.readers[0].pending), "reader 0 reading", expected)
            run.kill_reader(0)
            run.start_reader(0)
        self.run_until(run, lambda: fault.injected or run.is_finished(), f"a call of {point}", expected)
        if not fault.injected:
            pytest.skip(f"{self.connector} did not call {point} in this run")
        self.finish(run, expected, f"the enumerator raised once after {point}", failed_steps=1)
        assert f"injected by the kit after {point}" in run.step_failures[0]

    def test_coordinator_restart(self, kit_env: KitEnv) -> None:
        """The coordinator dies twice while readers read; its successors restore its state."""
        run, expected = self.open_run(kit_env)
        for share in (4, 2):
            self.run_until(
                run,
                lambda share=share: len(run.output) >= len(expected) // share,  # type: ignore[misc]
                f"1/{share} of the records committed",
                expected,
            )
            run.restart_coordinator()
        self.finish(run, expected, "the coordinator restarted twice")

    def test_global_restore(self, kit_env: KitEnv) -> None:
        """FLIP-537, a reader restored with the splits it had: every reader and the
        coordinator die; the readers restart from their checkpoints and report their
        splits (kept, or redistributed by the enumerator with reassignment on recovery)."""
        run, expected = self.open_run(kit_env)
        self.run_until(
            run,
            lambda: all(run.committed_by[s] > 0 and run.durable[s].splits for s in range(self.parallelism)),
            "every reader with a checkpoint holding splits",
            expected,
        )
        for subtask in range(self.parallelism):
            run.kill_reader(subtask)
        run.restart_coordinator()
        first = len(run.received)
        for subtask in range(self.parallelism):
            run.start_reader(subtask)
        reported = [e for e in run.received[first:] if e.type == "ReaderRegistration"]
        assert sum(len(getattr(e.body, "reported_splits", [])) for e in reported) > 0
        self.finish(run, expected, "global restore")

    def test_splits_of_a_reader_that_never_returns_are_reassigned(self, kit_env: KitEnv) -> None:
        """FLIP-537, a reader that does not come back: once it has departed, its splits
        go back to the enumerator, which gives them to the other readers."""
        run, expected = self.open_run(kit_env)
        victim = self.parallelism - 1
        held = self._kill_holding_reader(run, victim, expected)
        mark = len(run.sent)
        self.run_until(
            run,
            lambda: (
                held <= set().union(*(run.added_to(s, mark) for s in range(self.parallelism) if s != victim))
                or run.is_finished()
            ),
            f"the splits of subtask {victim} ({len(held)}) assigned to the other readers",
            expected,
        )
        self.finish(run, expected, f"reader {victim} killed for good")

    def test_reported_split_owned_elsewhere_is_dropped(self, kit_env: KitEnv) -> None:
        """FLIP-537, a split reported by a reader that the coordinator has given to another:
        the reader comes back after its splits moved and restores a checkpoint that still
        holds them; it must not read them (ReaderRegistered drops them)."""
        run, expected = self.open_run(kit_env)
        victim = self.parallelism - 1
        held = self._kill_holding_reader(run, victim, expected)
        others = [s for s in range(self.parallelism) if s != victim]
        mark = len(run.sent)
        self.run_until(
            run,
            lambda: any(run.added_to(s, mark) & held for s in others) or run.is_finished(),
            f"a split of subtask {victim} assigned to another reader",
            expected,
        )
        stale = {s["split_id"] for s in run.durable[victim].splits}
        elsewhere = stale & set().union(*(run.core.tracker.owned_ids(s) for s in others))
        if not elsewhere:
            pytest.skip("every split of the killed reader was finished before it came back")
        first = len(run.sent)
        run.start_reader(victim)
        registered = [e for e in run.sent[first:] if e.type == "ReaderRegistered" and e.subtask == victim]
        assert registered, f"subtask {victim} was not registered again"
        if not isinstance(run.core.source, SupportsSplitReassignmentOnRecovery):
            dropped = set(getattr(registered[-1].body, "dropped_split_ids", []))
            assert elsewhere <= dropped, f"the coordinator did not drop {sorted(elsewhere - dropped)}"
        self.finish(run, expected, "a restored reader reporting splits now owned elsewhere")

    def test_splits_added_while_running(self, kit_env: KitEnv) -> None:
        """New data in new splits while the source runs: the enumerator discovers them."""
        if not self.writes_while_running:
            pytest.skip(f"{self.connector} reads a fixed snapshot (writes_while_running = False)")
        run, expected = self.open_run(kit_env)
        self.run_until(run, lambda: bool(run.output), "the first records committed", expected)
        before = set().union(*(run.added_to(s) for s in range(self.parallelism)))
        mark = len(run.sent)
        expected += self.write_data(kit_env, 1)
        self.finish(run, expected, "splits added while running")
        after = set().union(*(run.added_to(s, mark) for s in range(self.parallelism)))
        assert after - before, "write_data(env, 1) added no split the enumerator assigned"

    def test_bounded_end(self, kit_env: KitEnv) -> None:
        """A bounded source ends: every reader is told NoMoreSplits once all is read."""
        run, expected = self.open_run(kit_env)
        if not self.bounded(run):
            pytest.skip(f"{self.connector} is unbounded with these options")
        self.finish(run, expected, "the bounded end")
        assert run.core.is_finished(), "the coordinator does not see the source as finished"
        ended = {e.subtask for e in run.sent if e.type == "NoMoreSplits"}
        assert ended == set(range(self.parallelism)), f"NoMoreSplits went to {sorted(ended)} only"

    def test_pause_and_resume_for_alignment(self, kit_env: KitEnv) -> None:
        """Watermark alignment: the hosts pause splits that run ahead; a paused split gives
        no record until it is resumed, and the output stays exact."""
        extra = self.alignment_options(kit_env)
        if extra is None:
            pytest.skip(f"{self.connector} has no event time (alignment_options is None)")
        run, expected = self.open_run(
            kit_env,
            extra,
            max_watermark_drift_ms=self.alignment_drift_ms,
            split_idle_timeout_ms=10 * self.run_config.round_ms,  # drained splits stop holding the others back
        )
        self.finish(run, expected, "watermark alignment")
        assert run.paused_seen > 0, (
            "no split was ever paused: alignment_options must make some splits' event times run ahead"
        )

    def test_random_failures(self, kit_env: KitEnv) -> None:
        """Reader kills (short and long), coordinator restarts and global restores at
        random points, as hypothesis draws them: the output is exact every time."""
        if self.random_schedules <= 0:
            pytest.skip("random_schedules = 0")

        @settings(
            max_examples=self.random_schedules,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(schedule=schedules(self.parallelism))
        def check(schedule: Schedule) -> None:
            self.run_schedule(kit_env.fresh(), schedule)

        check()

    def run_schedule(self, env: KitEnv, schedule: Schedule) -> None:
        run, expected = self.open_run(env)
        try:
            long_away = (run.config.session_timeout_ms + run.config.departure_timeout_ms) // run.config.round_ms + 10
            restarts: dict[int, int] = {}
            for gap, event, subtask in schedule:
                for _ in range(gap):
                    _restart_due(run, restarts)
                    run.round()
                if event == "restart_coordinator":
                    run.restart_coordinator()
                elif event == "global_restore":
                    for s in list(run.readers):
                        run.kill_reader(s)
                    run.restart_coordinator()
                    for s in range(self.parallelism):
                        restarts[s] = run.rounds
                elif subtask in run.readers:
                    run.kill_reader(subtask)
                    restarts[subtask] = run.rounds + (long_away if event == "kill_reader_for_long" else 1)
            for s in sorted(restarts):
                restarts[s] = run.rounds
            _restart_due(run, restarts)
            self.finish(run, expected, f"random failures {schedule}")
        finally:
            run.close()  # hypothesis runs many: one at a time holds threads

    # -- the real run --------------------------------------------------------------------

    @pytest.mark.kafka
    def test_real_run(self, kit_env: KitEnv, kafka_bootstrap: str, tmp_path: Path) -> None:
        """Coordinator and reader processes over Kafka: a reader SIGKILLed and restarted, the
        coordinator SIGKILLed and restarted; the output topic holds every record exactly
        once, and the audit of the control topics finds nothing wrong."""
        # Imported here: the memory scenarios need neither Kafka's clients nor the audit.
        from sluicegate.testing.real_run import RealRunPlan, real_run

        plan = RealRunPlan(
            connector=self.connector,
            source=kit_env.name,
            parallelism=self.parallelism,
            options={**self.source_options(kit_env), **self.real_run_options(kit_env)},
            expected=list(self.write_data(kit_env, 0)),
            row_key=self.row_key,
            records_timeout_s=self.real_run_records_timeout_s,
            env=self.real_run_env(),
        )
        real_run(plan, kafka_bootstrap, tmp_path)

    # -- helpers ----------------------------------------------------------------------------

    def _kill_holding_reader(self, run: MemoryRun, victim: int, expected: list[Hashable]) -> set[str]:
        """Run until ``victim`` has a checkpoint with unfinished splits, kill it; the splits it held."""
        self.run_until(
            run,
            lambda: run.committed_by[victim] > 0 and bool(run.core.tracker.owned_ids(victim)),
            f"reader {victim} with a checkpoint and splits to read",
            expected,
        )
        held = set(run.core.tracker.owned_ids(victim))
        run.kill_reader(victim)
        return held


def _restart_due(run: MemoryRun, restarts: dict[int, int]) -> None:
    for subtask, due in sorted(restarts.items()):
        if due <= run.rounds and subtask not in run.readers:
            run.start_reader(subtask)
            del restarts[subtask]


def schedules(parallelism: int) -> st.SearchStrategy[Schedule]:
    event = st.tuples(st.integers(1, 25), st.sampled_from(EVENTS), st.integers(0, parallelism - 1))
    return st.lists(event, min_size=1, max_size=4)
