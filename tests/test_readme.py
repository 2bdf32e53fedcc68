"""Every shell command in README.md is tested, whatever commands it holds.

The commands are extracted from the README's fenced code blocks (continuation lines joined,
``&&`` chains and ``#`` comments split off), so that lines added later are checked too:

* a concrete ``dpcompare`` command that finishes in seconds (:data:`RUN_IN_FULL`) runs; every
  other concrete one runs with ``--dry-run`` (every check it makes, nothing trained or
  written) and must succeed;
* a synopsis (``[--option]``, ``A | B``, ``<run id>`` or an upper-case placeholder such as
  ``NAME``) cannot run: its sub-command and each ``--option`` it names must exist;
* any other command (installing packages, Ray cluster commands, the test suite itself) cannot
  run here: the README marks its block with ``<!-- not run by tests: REASON -->``, and the
  commands skipped are exactly those of the marked blocks (a marker on a block with nothing to
  skip, or an unmarked command that cannot run, fails).

Shell globs expand against the repository; ``name: value`` lines of a block are output shown
beside a command, not commands. The ``python`` blocks are checked statically: they compile,
and every name they use is defined in them or a builtin.
"""

from __future__ import annotations

import ast
import builtins
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
MARKER = re.compile(r"<!--\s*not run by tests:\s*(.+?)\s*-->")
#: Programs a marked block may hold (what the tests cannot run here, and why).
NOT_RUNNABLE = {
    "python3.11 -m venv": "creates a virtual environment",
    ".venv/bin/pip": "installs packages",
    ".venv/bin/ruff": "the style check (run by CI)",
    ".venv/bin/python -m pytest": "the test suite itself",
    "ray ": "needs a Ray cluster",
}
#: Sub-commands whose README commands run in full (seconds, no training, nothing written),
#: unless they name one of :data:`NEVER_IN_FULL` (e.g. a download: always a dry run).
RUN_IN_FULL = frozenset({"datasets"})
NEVER_IN_FULL = frozenset({"--download", "--download-url"})
#: A line of a block that shows a command's output, not a command: ``name: value``.
OUTPUT = re.compile(r"^[\w.-]+:\s")
PLACEHOLDER = re.compile(r"(^|[\s/=:])[A-Z][A-Z0-9_]{2,}|<[^>]+>|\[|\]|(^|\s)\|(\s|$)")


@dataclass(frozen=True)
class Command:
    """One shell command of the README: its text, the block's language and marker."""

    text: str
    line: int
    marker: str | None

    @property
    def words(self) -> list[str]:
        return shlex.split(self.text)

    @property
    def is_dpcompare(self) -> bool:
        return bool(self.words) and Path(self.words[0]).name == "dpcompare"

    @property
    def is_synopsis(self) -> bool:
        return bool(PLACEHOLDER.search(self.text))


def code_blocks(text: str) -> list[tuple[str, str, int, str | None]]:
    """(language, body, first line number, marker) of every fenced block of ``text``."""
    blocks = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = re.match(r"^```(\w*)\s*$", lines[i])
        if not match:
            i += 1
            continue
        marker = None
        for back in range(i - 1, max(i - 4, -1), -1):  # a marker just above the block
            found = MARKER.search(lines[back])
            if found:
                marker = found.group(1)
                break
            if lines[back].strip() and not lines[back].strip().startswith("<!--"):
                break
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        blocks.append((match.group(1), "\n".join(lines[i + 1:end]), i + 2, marker))
        i = end + 1
    return blocks


def shell_commands(text: str) -> list[Command]:
    """Every shell command of the README's shell blocks (no language, ``bash``, ``sh``)."""
    out = []
    for language, body, first, marker in code_blocks(text):
        if language not in ("", "bash", "sh", "shell", "console"):
            continue
        # a line ending in a backslash, or an indented line, continues the one before
        joined = re.sub(r"\\\n\s*", " ", body)
        joined = re.sub(r"\n[ \t]+", " ", joined)
        for offset, line in enumerate(joined.splitlines()):
            line = line.split(" #", 1)[0].strip()
            if not line or line.startswith("#") or OUTPUT.match(line):
                continue
            for part in line.split("&&"):
                if part.strip():
                    out.append(Command(part.strip(), first + offset, marker))
    return out


COMMANDS = shell_commands(README.read_text(encoding="utf-8"))
DPCOMPARE = [c for c in COMMANDS if c.is_dpcompare]
CONCRETE = [c for c in DPCOMPARE if not c.is_synopsis]
SYNOPSES = [c for c in DPCOMPARE if c.is_synopsis]
OTHER = [c for c in COMMANDS if not c.is_dpcompare]


def test_the_readme_holds_commands_of_each_kind() -> None:
    assert len(CONCRETE) >= 3 and len(SYNOPSES) >= 3 and OTHER


def test_skipped_commands_are_exactly_those_of_the_marked_blocks() -> None:
    unmarked = [c.text for c in OTHER if c.marker is None]
    assert not unmarked, f"README commands that cannot run here and are not marked: {unmarked}"
    unknown = [c.text for c in OTHER
               if not any(c.text.startswith(prefix) for prefix in NOT_RUNNABLE)]
    assert not unknown, f"marked commands of no known kind: {unknown}"
    markers = {m for _, _, _, m in code_blocks(README.read_text(encoding="utf-8")) if m}
    stale = markers - {c.marker for c in OTHER}
    assert not stale, f"markers on blocks with nothing to skip: {stale}"


def subcommand_options() -> dict[str, set[str]]:
    from compare.cli.main import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions  # noqa: SLF001
                      if a.__class__.__name__ == "_SubParsersAction")
    return {name: set(sub._option_string_actions)  # noqa: SLF001
            for name, sub in subparsers.choices.items()}


@pytest.mark.parametrize("command", SYNOPSES, ids=lambda c: f"line{c.line}")
def test_synopsis_names_real_options(command: Command) -> None:
    options = subcommand_options()
    words = command.text.replace("[", " ").replace("]", " ").replace("|", " ").split()
    sub = words[1]
    assert sub in options, f"README line {command.line}: no sub-command {sub!r}"
    named = {w.split("=")[0] for w in words if w.startswith("--")}
    assert named <= options[sub], (
        f"README line {command.line}: unknown option(s) {named - options[sub]} of {sub}")


@pytest.mark.parametrize("command", CONCRETE, ids=lambda c: f"line{c.line}")
def test_concrete_command_runs_or_dry_runs(command: Command, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from compare.cli.main import main

    # shell globs (``reports/*``) expand against the repository, as a user's shell would
    args = [str(path) for word in command.words[1:]
            for path in (sorted(README.parent.glob(word)) if "*" in word else [word])]
    data_dir = os.environ.get("DPCOMPARE_DATA_DIR")
    needs_data = [w for w in args if w in ("pneumoniamnist", "retinamnist", "mnist",
                                           "cats_vs_dogs", "imdb", "chest_xray", "aptos")]
    if needs_data and not (data_dir and Path(data_dir).is_dir()):
        pytest.skip(f"needs the real data set {needs_data[0]} (DPCOMPARE_DATA_DIR not set)")
    monkeypatch.chdir(tmp_path)  # relative outputs (runs/mine...) would land here
    full = args[0] in RUN_IN_FULL and not NEVER_IN_FULL & set(args)
    status = main(args if full else [*args, "--dry-run"])
    captured = capsys.readouterr()
    assert status == 0, f"README line {command.line}: {command.text}\n{captured.err}"
    if not full:
        assert "dry run" in captured.out
        assert not any(tmp_path.iterdir()), f"the dry run wrote {list(tmp_path.iterdir())}"


def python_blocks() -> list[tuple[str, int]]:
    return [(body, first) for language, body, first, _ in
            code_blocks(README.read_text(encoding="utf-8")) if language == "python"]


@pytest.mark.parametrize(("body", "first"), python_blocks(), ids=lambda v: str(v)[:20])
def test_python_snippet_uses_only_names_it_defines(body: str, first: int) -> None:
    tree = ast.parse(body)
    defined = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            defined |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
    used = [(n.id, n.lineno) for n in ast.walk(tree)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    undefined = [f"{name} (README line {first + line - 1})" for name, line in used
                 if name not in defined]
    assert not undefined, f"names used but never defined: {undefined}"


def test_the_from_python_snippet_runs_in_a_fresh_clone(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The "From Python" snippet is executed as written, in a folder laid out as a fresh
    clone (the committed ``reports/`` beside it, no ``runs/``), with one substitution: the
    4-run ``smoke`` preset for the 30-run ``demo`` (minutes of training). It trains into its
    store, whose table, model, data and Grad-CAM calls then work."""
    (body,) = (b for b, _ in python_blocks() if "api.compare(" in b)
    fast = body.replace('api.compare("demo"', 'api.compare("smoke"')
    assert fast.count('api.compare("smoke"') == 1, "the snippet no longer calls the demo"
    (tmp_path / "reports").symlink_to(README.parent / "reports")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "readme_snippet"}
    exec(compile(fast, str(README), "exec"), namespace)  # noqa: S102 - the README's own code
    store, df, maps = namespace["store"], namespace["df"], namespace["maps"]
    assert len(store.outcome.ran) == 4 and not store.outcome.failed  # type: ignore[attr-defined]
    assert len(df) == 4 and set(df["backend"]) == {"tf", "torch"}  # type: ignore[index]
    assert maps.shape[0] == 8 and maps.min() >= 0 and maps.max() <= 1  # type: ignore[attr-defined]
    assert (tmp_path / "runs" / "demo" / "runs").is_dir()
