"""The statements of docs/ARCHITECTURE.md that a test can check, one test each, named by the
statement; each check is also run against code it must refuse. The page's "Rules" list names
the test of every rule it states (here, or in the test file of its subject, e.g. the import
graph in tests/test_import_graph.py), and the test that every path, name and test the page
cites exists keeps those names true.

Everything is read from the source with ``ast`` (nothing of the bench is imported), except the
report writer's test, which writes a report.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "ARCHITECTURE.md"
#: The bench's packages (the test tree is not one of them).
PACKAGES = ("dpcore", "tfpipe", "torchpipe", "compare", "benchmarks")


def python_files(root: Path = REPO, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """``package/relative/path.py`` -> file, for every module of ``packages`` under ``root``."""
    return {p.relative_to(root).as_posix(): p for package in packages
            for p in sorted((root / package).rglob("*.py"))}


def _dotted(node: ast.AST) -> str:
    """``a.b.c`` of a name or attribute chain, "" for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _owners(tree: ast.AST) -> Iterator[tuple[str, ast.AST]]:
    """(innermost enclosing function, node) of every node ("" at module level)."""

    def visit(node: ast.AST, owner: str) -> Iterator[tuple[str, ast.AST]]:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            owner = node.name
        yield owner, node
        for child in ast.iter_child_nodes(node):
            yield from visit(child, owner)

    yield from visit(tree, "")


# ------------------------------------------------------ commands that load no framework

#: Top-level modules of the frameworks and of the backends.
FRAMEWORKS_AND_BACKENDS = ("tensorflow", "tensorflow_privacy", "keras", "tf_keras", "torch",
                           "torchvision", "opacus", "tfpipe", "torchpipe")


def test_dpcompare_report_and_epsilon_no_library_load_no_framework(tmp_path: Path) -> None:
    """``dpcompare report --records`` (a committed report rebuilt elsewhere) and ``dpcompare
    epsilon --no-library`` run without importing a framework or a backend."""
    code = ("import sys\n"
            "from compare.cli.main import main\n"
            "assert main(['epsilon', '--n', '60000', '--batch-size', '256', "
            "'--noise-multiplier', '1', '--epochs', '1', '--no-library']) == 0\n"
            f"assert main(['report', '--records', 'reports/demo', '--out', {str(tmp_path)!r}]) "
            "== 0\n"
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & "
            f"set({FRAMEWORKS_AND_BACKENDS!r})))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert (tmp_path / "report.md").is_file()


# --------------------------------------------------------------- files are written in one way

#: Characters of an ``open`` mode that write.
WRITE_MODE = set("wax+")
#: Writers of pandas objects: a write when given a destination (else they return text).
PANDAS_WRITERS = {"to_csv", "to_json", "to_parquet", "to_pickle", "to_excel", "to_feather",
                  "to_hdf", "to_html", "to_latex", "to_markdown", "to_string", "to_stata"}
#: numpy's file writers (destination first).
NUMPY_WRITERS = {"save", "savez", "savez_compressed", "savetxt"}
#: ``module.function(obj, destination)`` writers.
DUMPERS = {("json", "dump"), ("pickle", "dump"), ("yaml", "dump"), ("yaml", "safe_dump"),
           ("torch", "save")}
#: ``module.function(source, destination)``: a file placed under a name.
MOVES = {("os", "replace"), ("os", "rename"), ("os", "link"), ("os", "symlink"),
         ("shutil", "move"), ("shutil", "copy"), ("shutil", "copy2"), ("shutil", "copyfile"),
         ("shutil", "copytree")}
#: ``module.function(destination, mode)`` openers.
OPENERS = {("gzip", "open"), ("bz2", "open"), ("lzma", "open"), ("io", "open"),
           ("os", "fdopen"), ("zipfile", "ZipFile"), ("tarfile", "open")}
#: ``os.open`` flags that write.
WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC"}


def _mode(call: ast.Call, index: int) -> str:
    """The ``open`` mode of ``call`` (positional ``index`` or ``mode=``): the text of a
    constant, "?" for an expression named like a mode, "" for none (a read)."""
    node = call.args[index] if len(call.args) > index else next(
        (k.value for k in call.keywords if k.arg == "mode"), None)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if node is not None and "mode" in ast.unparse(node).lower():
        return "?"
    return ""


def _writes(mode: str) -> bool:
    return mode == "?" or bool(WRITE_MODE & set(mode))


def write_target(call: ast.Call) -> ast.expr | None:
    """The expression naming the file ``call`` writes (the call itself when it names none),
    or None when the call writes no file. Handles writes through a handle: its ``open`` is the
    write (a handle's ``.write`` is not looked at)."""
    func, name = call.func, _dotted(call.func)
    head, _, last = name.rpartition(".")
    if name == "open":
        return call.args[0] if call.args and _writes(_mode(call, 1)) else None
    if (head, last) in OPENERS:
        return (call.args[0] if call.args else call) if _writes(_mode(call, 1)) else None
    if (head.rpartition(".")[2], last) in DUMPERS:
        return call.args[1] if len(call.args) > 1 else next(
            (k.value for k in call.keywords if k.arg in ("fp", "stream", "f")), None)
    if (head, last) in MOVES:
        return call.args[1] if len(call.args) > 1 else call
    if (head, last) == ("os", "open"):
        flags = {_dotted(n).rpartition(".")[2] for a in call.args[1:2] for n in ast.walk(a)}
        return (call.args[0] if call.args else call) if flags & WRITE_FLAGS else None
    if head in ("np", "numpy") and last in NUMPY_WRITERS:
        return call.args[0] if call.args else call
    if not isinstance(func, ast.Attribute):
        return None
    if last == "open":  # Path.open(mode)
        return func.value if _writes(_mode(call, 0)) else None
    if last in ("write_text", "write_bytes", "touch"):
        return func.value
    if last in ("savefig", "tofile"):
        return call.args[0] if call.args else call
    if last in ("extractall", "extract"):
        return call.args[0] if call.args else func.value
    if last in PANDAS_WRITERS:
        if call.args:
            return call.args[0]
        return next((k.value for k in call.keywords
                     if k.arg in ("path_or_buf", "buf", "path", "excel_writer")), None)
    if last in ("rename", "replace") and len(call.args) == 1 and not call.keywords:
        return func.value  # Path.rename / Path.replace (str.replace takes two)
    return None


def _is_call_to(expr: ast.AST, names: tuple[str, ...]) -> bool:
    return isinstance(expr, ast.Call) and _dotted(expr.func).rpartition(".")[2] in names


def file_writes(source: str, filename: str = "<source>") -> list[tuple[str, int, str]]:
    """(enclosing function, line, call) of every call in ``source`` that writes a file to a
    destination not given by :mod:`dpcore.io`: a name bound by ``with atomic_path(...) as
    NAME`` (in the function or an enclosing one), a handle opened on such a name, or an
    in-memory buffer (``io.BytesIO`` / ``StringIO``)."""
    found: list[tuple[str, int, str]] = []

    def safe(expr: ast.AST, scopes: list[set[str]]) -> bool:
        if isinstance(expr, ast.Name):
            return any(expr.id in scope for scope in scopes)
        if isinstance(expr, ast.Call) and _dotted(expr.func) in ("str", "Path", "os.fspath"):
            return bool(expr.args) and safe(expr.args[0], scopes)
        return False

    def visit(node: ast.AST, owner: str, scopes: list[set[str]]) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            owner, scopes = node.name, [*scopes, set()]
        if isinstance(node, ast.With):
            for item in node.items:
                visit(item.context_expr, owner, scopes)
                ctx, bound = item.context_expr, item.optional_vars
                target = write_target(ctx) if isinstance(ctx, ast.Call) else None
                if isinstance(bound, ast.Name) and (
                        _is_call_to(ctx, ("atomic_path", "BytesIO", "StringIO"))
                        or (target is not None and safe(target, scopes))):
                    scopes[-1].add(bound.id)
            for statement in node.body:
                visit(statement, owner, scopes)
            return
        if isinstance(node, ast.Assign) and _is_call_to(node.value, ("BytesIO", "StringIO")):
            scopes[-1].update(t.id for t in node.targets if isinstance(t, ast.Name))
        if isinstance(node, ast.Call):
            target = write_target(node)
            if target is not None and not safe(target, scopes):
                found.append((owner, node.lineno, ast.unparse(node)[:90]))
        for child in ast.iter_child_nodes(node):
            visit(child, owner, scopes)

    visit(ast.parse(source, filename), "", [set()])
    return found


#: The one writer: its atomic writers are how every other module writes.
WRITER = "dpcore/io.py"
#: The writes that do not go through :mod:`dpcore.io`, each (file, function) with its reason
#: (docs/ARCHITECTURE.md lists them). The benchmarks' scripts are left out as a package.
WRITE_EXCEPTIONS: dict[tuple[str, str], str] = {
    ("dpcore/claims.py", "_create"): "a claim file is created exclusively (O_CREAT | O_EXCL: "
                                      "one process wins; an atomic replace lets every one win)",
    ("dpcore/claims.py", "_remove_dead"): "a dead claim is renamed away: only one process's "
                                           "rename can succeed",
    ("dpcore/data/download.py", "fetch"): "a download is appended to its .part file so that a "
                                          "broken transfer resumes",
    ("dpcore/data/download.py", "_place"): "a .part file whose MD5 matched is moved onto its "
                                           "name (os.replace, atomic)",
    ("dpcore/data/download.py", "_unpack"): "a verified archive is extracted into a temporary "
                                            "folder and moved into place entry by entry",
    ("dpcore/memory.py", "reset_peak_rss"): "the kernel's control file /proc/self/clear_refs "
                                            "(no file is written)",
    ("compare/reporting/digest.py", "main"): "a maintainer's command rewrites README.md's "
                                             "generated block in place (not atomic yet)",
}
#: Packages whose writes are not checked: the benchmarks' scripts write their own outputs
#: (tables, figures, JSON lines) where their command line says.
UNCHECKED_PACKAGES = ("benchmarks",)


def writes_outside_dpcore_io(root: Path = REPO) -> list[str]:
    """``file:line (function) call`` of every write of the bench's packages that goes
    neither through :mod:`dpcore.io` nor is one of :data:`WRITE_EXCEPTIONS`."""
    found = []
    for name, path in python_files(root).items():
        if name == WRITER or name.split("/")[0] in UNCHECKED_PACKAGES:
            continue
        for owner, line, call in file_writes(path.read_text(encoding="utf-8"), name):
            if (name, owner) not in WRITE_EXCEPTIONS:
                found.append(f"{name}:{line} ({owner or 'module level'}) {call}")
    return found


def test_files_are_written_only_through_dpcore_io() -> None:
    offences = writes_outside_dpcore_io()
    assert not offences, ("file writes that bypass dpcore.io (write through its atomic "
                          "writers or atomic_path, or list the exception with its reason):\n"
                          + "\n".join(offences))


def test_every_stated_write_exception_still_writes() -> None:
    """An exception whose write is gone is taken off the list (and off the page)."""
    writing = {(name, owner) for name, path in python_files().items()
               for owner, _, _ in file_writes(path.read_text(encoding="utf-8"), name)}
    assert set(WRITE_EXCEPTIONS) <= writing, set(WRITE_EXCEPTIONS) - writing


def test_the_write_check_finds_each_kind_of_write_and_passes_atomic_ones() -> None:
    source = '''
import json, os, shutil
import numpy as np
from dpcore.io import atomic_path

def plain(path, table, fig, weights, obj):
    open(path, "w").close()
    path.write_text("x")
    table.to_csv(path, index=False)
    np.savez(path, **weights)
    fig.savefig(path)
    with open(path, "a") as fh:
        json.dump(obj, fh)
    os.replace(path, path.with_suffix(".x"))
    with path.open("wb") as fh:
        np.save(fh, weights)

def atomic(path, table, fig, weights, obj):
    with atomic_path(path) as tmp:
        table.to_csv(tmp, index=False)
    with atomic_path(path) as tmp, tmp.open("wb") as fh:
        np.savez(fh, **weights)
    with atomic_path(path) as tmp:
        fig.savefig(str(tmp))
    buffer = io.BytesIO()
    np.savez(buffer, **weights)
    text = table.to_csv(index=False)
    with open(path) as fh, path.open("rb") as raw:
        json.load(fh)
    return text, "a-b".replace("-", "+")
'''
    found = file_writes(source)
    assert {owner for owner, _, _ in found} == {"plain"}
    assert [call.split("(")[0] for _, _, call in found] == [
        "open", "path.write_text", "table.to_csv", "np.savez", "fig.savefig", "open",
        "json.dump", "os.replace", "path.open", "np.save"]


def test_the_report_writer_writes_every_file_atomically_csv_tables_included(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rewrite of a report folder cut short while it writes a CSV table leaves the earlier
    table whole (and no temporary file); a whole write gives pandas' own CSV bytes."""
    from compare.reporting.section import SectionOutput
    from compare.reporting.writer import write_report_files

    earlier = pd.DataFrame({"setting": ["a", "b"], "accuracy": [0.5, 0.75]})
    write_report_files(tmp_path, [SectionOutput(lines=["# r"], tables={"t.csv": earlier})])
    assert (tmp_path / "t.csv").read_text() == earlier.to_csv(index=False)

    def cut_short(self: pd.DataFrame, path: object, *args: object, **kwargs: object) -> None:
        Path(str(path)).write_text("setting,acc")  # half a table, then the process dies
        raise KeyboardInterrupt

    monkeypatch.setattr(pd.DataFrame, "to_csv", cut_short)
    later = pd.DataFrame({"setting": ["c"], "accuracy": [0.1]})
    with pytest.raises(KeyboardInterrupt):
        write_report_files(tmp_path, [SectionOutput(lines=["# r"], tables={"t.csv": later})])
    assert (tmp_path / "t.csv").read_text() == "setting,accuracy\na,0.5\nb,0.75\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md", "t.csv"]


# ------------------------------------------------------------------------ one assembly of a run

#: The one assembly of a training run.
ASSEMBLY = "dpcore/assembly.py"
#: Who may build a step engine from a backend's ``ENGINES``: the assembly (training) and
#: ``dpcompare verify``, which runs one configured step of each engine.
ENGINE_BUILDERS = {ASSEMBLY, "dpcore/verify/run.py"}
#: Who may ask :func:`dpcore.backend.choose_engine`: the assembly, and the grid-cost estimate
#: (which engine's measured step time a dry run prices).
ENGINE_CHOOSERS = {ASSEMBLY, "benchmarks/grid_cost.py"}
#: The training loops the assembly hands a run to (:mod:`dpcore.pipeline`).
LOOPS = ("fit", "fit_library")


def assembly_offences(root: Path = REPO) -> list[str]:
    """Where a module other than the assembly assembles a run: imports the loops of
    :mod:`dpcore.pipeline`, builds an engine from ``ENGINES`` (outside
    :data:`ENGINE_BUILDERS`), asks for the engine or the library recipe, constructs a step
    engine class outside its backend's ``backend`` module, or defines a backend ``train``
    instead of binding :func:`dpcore.assembly.backend_train`."""
    found = []
    for name, path in python_files(root).items():
        tree = ast.parse(path.read_text(encoding="utf-8"), name)
        for _, node in _owners(tree):
            where = f"{name}:{getattr(node, 'lineno', 0)}"
            if (isinstance(node, ast.ImportFrom) and node.module == "dpcore.pipeline"
                    and name != ASSEMBLY):
                found += [f"{where} imports {a.name} from dpcore.pipeline"
                          for a in node.names if a.name in LOOPS]
            elif (isinstance(node, ast.Subscript) and _dotted(node.value).endswith("ENGINES")
                  and name not in ENGINE_BUILDERS):
                found.append(f"{where} builds an engine from ENGINES")
            elif isinstance(node, ast.Call):
                called = _dotted(node.func).rpartition(".")[2]
                if called == "choose_engine" and name not in ENGINE_CHOOSERS:
                    found.append(f"{where} chooses an engine")
                elif called == "library_recipe" and name != ASSEMBLY:
                    found.append(f"{where} builds a library recipe")
                elif (called.endswith("StepEngine") and name.split("/")[0] in ("tfpipe",
                                                                               "torchpipe")
                      and not name.endswith("/backend.py")):
                    found.append(f"{where} constructs {called}")
        if name in ("tfpipe/train.py", "torchpipe/train.py"):
            bound = [n for n in tree.body if isinstance(n, ast.Assign)
                     and any(_dotted(t) == "train" for t in n.targets)
                     and _is_call_to(n.value, ("backend_train",))]
            defined = [n for n in tree.body if isinstance(n, ast.FunctionDef)
                       and n.name == "train"]
            if not bound or defined:
                found.append(f"{name}: train is not dpcore.assembly.backend_train(NAME)")
    return found


def test_a_run_is_assembled_only_in_dpcore_assembly() -> None:
    offences = assembly_offences()
    assert not offences, "assembly outside dpcore/assembly.py:\n" + "\n".join(offences)


def test_the_assembly_check_sees_a_backend_that_assembles_its_own_run(tmp_path: Path) -> None:
    for package in PACKAGES:
        (tmp_path / package).mkdir()
    (tmp_path / "tfpipe" / "train.py").write_text(
        "from dpcore.pipeline import fit\n"
        "from tfpipe.backend import ENGINES\n"
        "def train(config, dataset, backend):\n"
        "    engine = ENGINES['fast'](None, config, None, None)\n"
        "    recipe = backend.library_recipe(None, config, None)\n"
        "    return fit(config, dataset, engine=TfStepEngine(None))\n")
    assert [line.split(" ", 1)[1] for line in assembly_offences(tmp_path)] == [
        "imports fit from dpcore.pipeline", "builds an engine from ENGINES",
        "builds a library recipe", "constructs TfStepEngine",
        "train is not dpcore.assembly.backend_train(NAME)"]


# --------------------------------------------------------------------------- one registry type

#: The one registry class.
REGISTRY = "dpcore/registry.py"


def registry_offences(root: Path = REPO) -> list[str]:
    """Registries that are not :class:`dpcore.registry.Registry`: a class other than it with
    a ``register`` method, or a function that files its argument in a module-level mapping
    and returns it (a decorator over a dict)."""
    found = []
    for name, path in python_files(root).items():
        if name == REGISTRY:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), name)
        module_names = {t.id for n in tree.body if isinstance(n, ast.Assign | ast.AnnAssign)
                        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                        if isinstance(t, ast.Name)}
        for _, node in _owners(tree):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(b, ast.FunctionDef) and b.name == "register" for b in node.body):
                found.append(f"{name}:{node.lineno} class {node.name} has its own register")
            if not isinstance(node, ast.FunctionDef) or not node.args.args:
                continue
            param = node.args.args[0].arg
            files = any(isinstance(s, ast.Assign) and isinstance(s.value, ast.Name)
                        and s.value.id == param and any(
                            isinstance(t, ast.Subscript) and _dotted(t.value) in module_names
                            for t in s.targets) for s in node.body)
            returns = any(isinstance(s, ast.Return) and isinstance(s.value, ast.Name)
                          and s.value.id == param for s in node.body)
            if files and returns:
                found.append(f"{name}:{node.lineno} {node.name} files its argument in a "
                             "module-level mapping")
    return found


def test_every_registry_is_a_dpcore_registry() -> None:
    offences = registry_offences()
    assert not offences, ("registries other than dpcore.registry.Registry:\n"
                          + "\n".join(offences))


def test_the_registry_check_sees_a_decorator_over_a_dict(tmp_path: Path) -> None:
    for package in PACKAGES:
        (tmp_path / package).mkdir()
    (tmp_path / "compare" / "tables.py").write_text(
        "TABLES = {}\n"
        "def table(name):\n"
        "    def register(builder):\n"
        "        TABLES[name] = builder\n"
        "        return builder\n"
        "    return register\n"
        "class Rules:\n"
        "    def register(self, key): ...\n")
    assert [o.split(" ", 1)[1] for o in registry_offences(tmp_path)] == [
        "register files its argument in a module-level mapping",
        "class Rules has its own register"]


# -------------------------------------------------------------------------- the thin facade

#: The most lines of code (after its docstring) a function of compare/api.py may have: it
#: checks its arguments and calls the module that does the work.
API_FUNCTION_LINES = 15


def test_compare_api_only_delegates_and_stays_under_400_lines() -> None:
    path = REPO / "compare" / "api.py"
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 400
    long = []
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef):
            long.append(f"class {node.name}")
        if not isinstance(node, ast.FunctionDef):
            continue
        body = node.body[1:] if ast.get_docstring(node) is not None else node.body
        lines = body[-1].end_lineno - body[0].lineno + 1 if body else 0  # type: ignore[operator]
        if lines > API_FUNCTION_LINES:
            long.append(f"{node.name}: {lines} lines")
    assert not long, "compare/api.py holds work that belongs in a module:\n" + "\n".join(long)


# ------------------------------------------------------------ docstrings state contracts

#: This project's issues are named "issue N" (also "issues N and M", "issue #N").
ISSUE = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)
#: A bare ``#N``; it cites another project's issue when it follows one qualified by its
#: project (``tensorflow/privacy#72``, ``opacus#664``) within :data:`CITATION_REACH` characters.
BARE_NUMBER = re.compile(r"(?<![\w/.\-&\\])#\d+\b")
QUALIFIED = re.compile(r"[A-Za-z][\w.\-]*#\d+")
CITATION_REACH = 200
#: Folders whose files are not read (not the project's prose, or generated).
SKIPPED_FOLDERS = {"reports", "__pycache__", "node_modules", "build", "dist"}
#: References that are test data, not prose: (file, reference).
ALLOWED_REFERENCES = {
    # the report contract's own check of issue references, fed a note that cites one
    ("tests/compare/test_report_contract.py", "Iss" + "ue 18"),
}


def _prose_of_python(text: str) -> Iterator[tuple[int, str, bool]]:
    """(line, text, is_prose) of every comment and string literal: comments and
    statement-level strings (docstrings) are prose; other strings are data."""
    tree = ast.parse(text)
    statement_strings = {id(node.value) for node in ast.walk(tree)
                         if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                         and isinstance(node.value.value, str)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and \
                isinstance(node.value.value, str):
            yield node.lineno, node.value.value, True
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                id(node) not in statement_strings:
            yield node.lineno, node.value, False
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string, True


def issue_references(text: str, *, prose: bool = True) -> list[str]:
    """The references to this project's issues in ``text``: "issue N" anywhere, and a bare
    ``#N`` in prose unless it continues a citation of another project's issue."""
    found = [m.group() for m in ISSUE.finditer(text)]
    if prose:
        found += [m.group() for m in BARE_NUMBER.finditer(text)
                  if not QUALIFIED.search(text[max(0, m.start() - CITATION_REACH):m.start()])]
    return found


def project_text_files(root: Path = REPO) -> Iterator[Path]:
    """Every ``.py`` file of the repository, README.md and every ``docs/**/*.md``."""
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        if not any(p.startswith(".") or p in SKIPPED_FOLDERS for p in parts):
            yield path
    yield root / "README.md"
    yield from sorted((root / "docs").rglob("*.md"))


def test_no_docstring_comment_or_doc_names_an_issue_of_this_project() -> None:
    offences = []
    for path in project_text_files():
        text = path.read_text(encoding="utf-8")
        name = path.relative_to(REPO).as_posix()
        if path.suffix == ".py":
            for line, piece, prose in _prose_of_python(text):
                offences += [f"{name}:{line}: {ref}"
                             for ref in issue_references(piece, prose=prose)
                             if (name, ref) not in ALLOWED_REFERENCES]
        else:
            offences += [f"{name}: {ref}" for ref in issue_references(text)]
    assert not offences, ("state the contract, not the issue it came from:\n"
                          + "\n".join(sorted(offences)))


def test_the_issue_check_tells_this_projects_issues_from_other_projects() -> None:
    ours = "iss" + "ue"  # so that this file does not name one
    assert issue_references(f"Every record written since {ours} 30 keeps it.") == [f"{ours} 30"]
    assert issue_references(f"{ours.title()}s 37 and 38") == [f"{ours.title()}s 37"]
    assert issue_references("as asked in #" + "12, the") == ["#12"]
    assert issue_references("tensorflow/privacy#171 and #287; opacus#664, #93") == []
    assert issue_references("escaped: \\#1 {a}") == []
    assert issue_references("data: C #1", prose=False) == []
    text = f'def f():\n    """Contract ({ours} 5)."""\n    x = "a #3 b"  # see #4\n'
    assert [(line, issue_references(piece, prose=prose))
            for line, piece, prose in _prose_of_python(text)
            if issue_references(piece, prose=prose)] == [(2, [f"{ours} 5"]), (3, ["#4"])]


# ------------------------------------------------- test files named after what they test

#: Test files directly in tests/ check the repository as a whole (the README, the notebook,
#: the import graph, this page); tests/end_to_end/ holds walkthroughs through every layer.
UNNAMED_TEST_FOLDERS = {"tests", "tests/end_to_end"}


def module_words(root: Path = REPO) -> set[str]:
    """The names a test file may start with: each module, package and folder of the bench's
    packages, by its own name and by its path joined with ``_`` (``data_cache`` for
    ``dpcore/data/cache.py``)."""
    words = set()
    for package in PACKAGES:
        for path in (root / package).rglob("*"):
            if "__pycache__" in path.parts or path.name.startswith("."):
                continue
            if path.is_file() and path.suffix != ".py":
                continue
            parts = [p for p in path.relative_to(root).with_suffix("").parts if p != "__init__"]
            words.update("_".join(parts[i:]) for i in range(len(parts)))
        words.add(package)
    return words


def misnamed_test_files(root: Path = REPO) -> list[str]:
    """Test files outside :data:`UNNAMED_TEST_FOLDERS` whose name is not
    ``test_<module>[_<aspect>].py`` for a word of :func:`module_words`."""
    words = module_words(root)
    found = []
    for path in sorted((root / "tests").rglob("test_*.py")):
        if path.parent.relative_to(root).as_posix() in UNNAMED_TEST_FOLDERS:
            continue
        stem = path.stem[len("test_"):].split("_")
        if not any("_".join(stem[:i]) in words for i in range(1, len(stem) + 1)):
            found.append(path.relative_to(root).as_posix())
    return found


def test_test_files_are_named_after_the_module_they_test() -> None:
    offences = misnamed_test_files()
    assert not offences, ("name each test file test_<module>[_<aspect>].py after the module it "
                          "tests (a walkthrough goes to tests/end_to_end/):\n"
                          + "\n".join(offences))


def test_the_naming_check_sees_a_story_name(tmp_path: Path) -> None:
    (tmp_path / "dpcore" / "data").mkdir(parents=True)
    (tmp_path / "dpcore" / "data" / "cache.py").write_text("")
    for folder in ("tests/dpcore", "tests/end_to_end"):
        (tmp_path / folder).mkdir(parents=True)
    for name in ("tests/dpcore/test_data_cache_reuse.py", "tests/dpcore/test_cache.py",
                 "tests/dpcore/test_first_hour.py", "tests/end_to_end/test_first_hour.py",
                 "tests/test_readme.py"):
        (tmp_path / name).write_text("")
    assert misnamed_test_files(tmp_path) == ["tests/dpcore/test_first_hour.py"]


# ------------------------------------------------------------- what this page cites exists

#: Top-level folders a cited path may start with.
CITED_ROOTS = (*PACKAGES, "tests", "docs", "reports", "examples")


def _defined_names(path: Path) -> set[str]:
    """Names a module defines or imports at any level (functions, classes, assignments)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _module_file(root: Path, dotted: str) -> Path | None:
    base = root.joinpath(*dotted.split("."))
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    return base / "__init__.py" if (base / "__init__.py").is_file() else None


def cited_references(text: str) -> Iterator[str]:
    """The paths (``pkg/file.py``, ``pkg/folder/``, ``pkg/file.py:name``,
    ``tests/x.py::test_name``) and dotted names (``dpcore.backend.load_backend``) cited in
    ``text`` between backquotes (a call's arguments and a leading ``@`` dropped)."""
    roots = "|".join(CITED_ROOTS)
    for match in re.finditer(r"`([^`\n]+)`", text):
        token = re.sub(r"\(.*$", "", match.group(1).strip()).lstrip("@")
        if (re.fullmatch(rf"(?:{roots})(?:/[\w.\-]+)+/?(?:::?[\w.]+)*", token)
                or re.fullmatch(rf"(?:{'|'.join(PACKAGES)})(?:\.\w+)+", token)):
            yield token


def missing_citation(root: Path, reference: str) -> str | None:
    """Why ``reference`` (see :func:`cited_references`) names nothing, or None."""
    if "/" in reference:
        path, cited, name = reference.partition(":")
        target = root / path
        if not target.exists():
            return f"{reference}: no such file or folder"
        if not cited:
            return None
        if name.startswith(":"):  # path::[Class::]test
            test = name.rsplit("::", 1)[-1].lstrip(":")
            return None if test in _defined_names(target) else (
                f"{reference}: {path} has no test {test}")
        first = name.split(".")[0]
        return None if first in _defined_names(target) else (
            f"{reference}: {path} defines no {first}")
    parts = reference.split(".")
    for i in range(len(parts), 0, -1):
        module = _module_file(root, ".".join(parts[:i]))
        if module is None:
            continue
        if i == len(parts) or parts[i] in _defined_names(module):
            return None
        return f"{reference}: {'.'.join(parts[:i])} defines no {parts[i]}"
    return f"{reference}: no such module"


def test_every_path_module_name_and_test_this_page_cites_exists() -> None:
    text = PAGE.read_text(encoding="utf-8")
    missing = [why for ref in cited_references(text)
               if (why := missing_citation(REPO, ref)) is not None]
    assert not missing, "docs/ARCHITECTURE.md cites what is not there:\n" + "\n".join(missing)


def test_the_citation_check_sees_a_stale_name(tmp_path: Path) -> None:
    (tmp_path / "dpcore").mkdir()
    (tmp_path / "dpcore" / "__init__.py").write_text("")
    (tmp_path / "dpcore" / "io.py").write_text("def atomic_path(): ...\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_io.py").write_text("def test_a(): ...\n")
    text = ("`dpcore/io.py:atomic_path` `dpcore.io.atomic_path(p)` `dpcore/io.py` "
            "`dpcore/io.py:write_all` `dpcore.io.write_all` `dpcore/gone.py` "
            "`tests/test_io.py::test_a` `tests/test_io.py::test_b` `dpcore.nothing.here`")
    assert [missing_citation(tmp_path, r) for r in cited_references(text)] == [
        None, None, None, "dpcore/io.py:write_all: dpcore/io.py defines no write_all",
        "dpcore.io.write_all: dpcore.io defines no write_all",
        "dpcore/gone.py: no such file or folder", None,
        "tests/test_io.py::test_b: tests/test_io.py has no test test_b",
        "dpcore.nothing.here: dpcore defines no nothing"]
