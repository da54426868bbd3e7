"""The fenced snippets of README.md and docs/*.md, and what each is marked to be.

A python or bash snippet is a promise to a reader who will paste it, so each says on the
line before its fence (an HTML comment: GitHub shows nothing of it) which of three it is:

- ``<!-- snippet: run ID -->``: tests/integration/test_doc_snippets.py runs it as written
  against the suite's broker, by its case ID;
- ``<!-- snippet: tested by PATH -->``: the test file PATH runs it (and reads this file);
- ``<!-- snippet: not run: WHY -->``: it is not meant to run as it stands (a fragment, a
  cluster, a command that runs for minutes), and WHY says so.

A snippet that runs (the first two) says what it needs on its first line, ``# needs: ...``,
where the reader who pastes it sees it. tests/unit/test_doc_snippet_marks.py holds every
fence to this, so a new snippet cannot go untested without saying why.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKED_LANGUAGES = frozenset({"python", "bash", "sh", "shell", "console"})
"""The fences that hold code a reader may paste and run."""
NEEDS = "# needs:"

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<ticks>`{3,})(?P<info>[^`]*)$")
_MARK = re.compile(r"^\s*<!--\s*snippet:\s*(?P<mark>.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Snippet:
    doc: Path
    line: int
    """The line number of the opening fence (1-based)."""
    language: str
    """The fence's info string's first word ('' when it names none)."""
    text: str
    """The content, the fence's indentation taken off."""
    mark: str | None
    """The marker's text after ``snippet:``, or None when the line before the fence has none."""

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT) if self.doc.is_relative_to(ROOT) else self.doc}:{self.line}"

    @property
    def run_id(self) -> str | None:
        """The case ID of a snippet marked ``run ID``."""
        match = re.fullmatch(r"run\s+(\S+)", self.mark or "")
        return match.group(1) if match else None

    @property
    def tested_by(self) -> str | None:
        """The test file of a snippet marked ``tested by PATH``."""
        match = re.fullmatch(r"tested by\s+(\S+)", self.mark or "")
        return match.group(1) if match else None

    @property
    def not_run_because(self) -> str | None:
        """Why a snippet marked ``not run: WHY`` is not run."""
        match = re.fullmatch(r"not run:\s*(.*)", self.mark or "")
        return match.group(1) if match else None

    @property
    def needs(self) -> str | None:
        """What the snippet says it needs (its first line ``# needs: ...``)."""
        first = self.text.split("\n", 1)[0]
        return first[len(NEEDS) :].strip() if first.startswith(NEEDS) else None


def documents() -> list[Path]:
    """The Markdown a new user reads: the README and docs/*.md."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def snippets_of(doc: Path, markdown: str) -> Iterator[Snippet]:
    """Every fenced block of ``markdown`` (the text of ``doc``), in order."""
    lines = markdown.splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, ticks = len(opening["indent"]), opening["ticks"]
        body: list[str] = []
        end = index + 1
        while end < len(lines) and not re.fullmatch(rf"\s*{ticks}`*\s*", lines[end]):
            line = lines[end]
            body.append(line[indent:] if not line[:indent].strip() else line.lstrip())
            end += 1
        mark = _MARK.match(lines[index - 1]) if index > 0 else None
        words = opening["info"].split()
        yield Snippet(doc, index + 1, words[0] if words else "", "\n".join(body) + "\n", mark["mark"] if mark else None)
        index = end + 1


def all_snippets() -> list[Snippet]:
    return [s for doc in documents() for s in snippets_of(doc, doc.read_text(encoding="utf-8"))]


def checked_snippets() -> list[Snippet]:
    """The python and shell snippets: the ones every reader may paste."""
    return [s for s in all_snippets() if s.language in CHECKED_LANGUAGES]


def snippets_to_run() -> list[Snippet]:
    return [s for s in checked_snippets() if s.run_id is not None]
