"""Every fence of README.md and docs/*.md names its language, and every python or shell
snippet is marked run, tested by, or not run with a reason (tests/support/doc_snippets.py):
a new snippet cannot go untested without saying why."""

from __future__ import annotations

import pytest
from doc_snippets import ROOT, Snippet, all_snippets, checked_snippets, snippets_of

MARKS = "<!-- snippet: run ID -->, <!-- snippet: tested by PATH --> or <!-- snippet: not run: WHY -->"


def problem_of(snippet: Snippet) -> str | None:
    """What is wrong with the marking of a python or shell snippet (None: nothing)."""
    if snippet.mark is None:
        return f"no mark on the line before its fence: write {MARKS}"
    if snippet.run_id is not None:
        return None if snippet.needs else "runs, and does not say what it needs (its first line: # needs: ...)"
    if snippet.tested_by is not None:
        test = ROOT / snippet.tested_by
        if not test.is_file():
            return f"is tested by {snippet.tested_by}, which does not exist"
        if snippet.doc.name not in test.read_text(encoding="utf-8"):
            return f"is tested by {snippet.tested_by}, which does not read {snippet.doc.name}"
        return None if snippet.needs else "runs, and does not say what it needs (its first line: # needs: ...)"
    why = snippet.not_run_because
    if why is None:
        return f"has a mark that is none of {MARKS}"
    return None if len(why.split()) >= 3 else f"is not run, and says why in fewer than three words: {why!r}"


def test_every_fence_names_its_language() -> None:
    """A bare fence could hold a command nobody checks (and GitHub colours nothing)."""
    bare = [s.where for s in all_snippets() if not s.language]
    assert not bare, f"name the language of these fences (```bash, ```python, ```text ...): {bare}"


def test_every_python_and_shell_snippet_is_marked() -> None:
    problems = [f"{s.where} {p}" for s in checked_snippets() if (p := problem_of(s)) is not None]
    assert not problems, "\n".join(problems)


def test_the_docs_run_some_snippets_and_test_the_spark_ones() -> None:
    """The marks are read at all: the readers' snippets are run, the README's Spark ones tested."""
    snippets = checked_snippets()
    assert {s.run_id for s in snippets} >= {"readme-reader", "readers-reader"}
    assert "tests/e2e/test_readme_spark_snippet.py" in {s.tested_by for s in snippets}


SAMPLE = """\
Some prose.

<!-- snippet: not run: needs a cluster of yours -->
```bash
sluicegate coordinator --source s
```

```python
print("nobody said what I am")
```

  <!-- snippet: run sample -->
  ```bash
  # needs: nothing at all
  echo indented in a list
  ```

<!-- snippet: tested by tests/no_such_test.py -->
```python
# needs: nothing
```

<!-- snippet: not run: short -->
```sh
true
```
"""


@pytest.fixture
def sample() -> list[Snippet]:
    return list(snippets_of(ROOT / "docs" / "sample.md", SAMPLE))


def test_the_marks_are_read_from_the_line_before_the_fence(sample: list[Snippet]) -> None:
    assert [(s.line, s.language) for s in sample] == [
        (4, "bash"),
        (8, "python"),
        (13, "bash"),
        (19, "python"),
        (24, "sh"),
    ]
    assert sample[0].not_run_because == "needs a cluster of yours"
    assert sample[1].mark is None
    assert (sample[2].run_id, sample[2].needs, sample[2].text) == (
        "sample",
        "nothing at all",
        "# needs: nothing at all\necho indented in a list\n",
    )
    assert sample[3].tested_by == "tests/no_such_test.py"


def test_an_unmarked_a_badly_tested_and_an_unexplained_snippet_are_each_named(sample: list[Snippet]) -> None:
    problems = [problem_of(s) for s in sample]
    assert problems[0] is None and problems[2] is None
    assert problems[1] is not None and "no mark" in problems[1]
    assert problems[3] is not None and "does not exist" in problems[3]
    assert problems[4] is not None and "fewer than three words" in problems[4]
