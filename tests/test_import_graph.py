"""The packages' import graph: no cycle, no private name imported across packages, and the
layering of docs/ARCHITECTURE.md (dpcore imports neither a backend nor compare; a backend does
not import the other backend nor compare; compare imports no backend: it loads one by name
with :func:`dpcore.backend.load_backend`, the one dynamic import of a backend, and reaches the
benchmarks, which import the backends, only by loading their entry module by name in
:func:`compare.bench.load_benchmarks`; neither dpcore nor compare imports a framework).

The graph is read from the source with ``ast`` (nothing is imported), over every import
statement, including the lazy ones inside functions: a lazy import hides a cycle from Python's
import machinery, not from the design. Two graphs must be acyclic: the modules' own imports,
and the same with the ``__init__`` of every package Python initialises on the way to an
imported module (importing ``dpcore.ldp.mechanisms`` runs ``dpcore/ldp/__init__.py`` first).
A lazy import that closes a cycle through a package's ``__init__`` fails the second.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("dpcore", "tfpipe", "torchpipe", "compare", "benchmarks")
#: Which of the bench's packages each package may import (besides itself).
ALLOWED: dict[str, set[str]] = {
    "dpcore": set(),
    "tfpipe": {"dpcore"},
    "torchpipe": {"dpcore"},
    # compare reaches a backend only through dpcore.backend.load_backend, and the benchmarks
    # (which time the backends' parts) only through compare.bench.load_benchmarks: both are
    # dynamic imports, checked below
    "compare": {"dpcore"},
    "benchmarks": {"dpcore", "tfpipe", "torchpipe"},
}
#: The frameworks (top-level modules) only a backend (or a benchmark) may import.
FRAMEWORKS = ("tensorflow", "tensorflow_privacy", "keras", "tf_keras", "torch", "torchvision",
              "opacus", "jax")
#: The packages that import no framework, not even lazily inside a function.
FRAMEWORK_FREE = ("dpcore", "compare")


def module_files(root: Path = REPO) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the bench's packages."""
    out: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path, modules: dict[str, Path]
               ) -> Iterator[tuple[str, str, int]]:
    """(imported module, imported name or "", line) of every import statement in the file.

    ``from a.b import c`` gives the module ``a.b.c`` when that is a module of the bench, else
    ``a.b`` with the name ``c``. Relative imports are resolved against ``name``.
    """
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, "", node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in modules:
                    yield full, "", node.lineno
                else:
                    yield base, alias.name, node.lineno


def _module_of(target: str, modules: dict[str, Path]) -> str:
    """The bench's module an imported name lives in (``a.b.c`` of a package path -> the
    longest prefix that is a module), or "" for a module outside the bench."""
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the bench's modules it imports."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for target, _, _ in imports_of(name, path, modules):
            target = _module_of(target, modules)
            if target and target != name:
                graph[name].add(target)
    return graph


def package_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the bench's modules its imports run (every statement, lazy and type-only
    ones too): each imported module with every package whose ``__init__`` Python runs on the
    way there (the packages that hold the importer itself are already initialised when it
    runs)."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        for target, _, _ in imports_of(name, path, modules):
            target = _module_of(target, modules)
            if not target:
                continue
            parts = target.split(".")
            runs = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
            graph[name] |= {m for m in runs if m in modules and m not in own and m != name}
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan), as a sorted
    list of module names; a module importing itself is not counted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:  # recursive: the graph is a few hundred modules
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_the_cycle_finder_finds_a_cycle_and_only_cycles() -> None:
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_the_graph_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "dpcore" / "metrics"
    pkg.mkdir(parents=True)
    (tmp_path / "dpcore" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from .a import f\n")
    (pkg / "a.py").write_text("def f():\n    from dpcore.metrics import b\n")
    (pkg / "b.py").write_text("from . import a\n")
    modules = {k: v for k, v in module_files(tmp_path).items() if k.startswith("dpcore")}
    graph = import_graph(modules)
    assert graph["dpcore.metrics"] == {"dpcore.metrics.a"}
    assert find_cycles(graph) == [["dpcore.metrics.a", "dpcore.metrics.b"]]


def test_no_import_cycle() -> None:
    cycles = find_cycles(import_graph(module_files()))
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_no_import_cycle_through_a_package_init() -> None:
    """No module, by a lazy import or through a package's ``__init__``, runs an import that
    leads back to itself (dpcore's layers point one way: the configs read the registries'
    names from leaf modules, never from the layers above them)."""
    cycles = find_cycles(package_graph(module_files()))
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_package_graph_sees_a_cycle_a_lazy_import_hides_in_a_package(tmp_path: Path
                                                                         ) -> None:
    """``choices`` imports a leaf module lazily, but the leaf's package ``__init__`` imports
    a module that imports ``choices``: a cycle only the package graph shows (each file's own
    imports form none)."""
    root = tmp_path / "dpcore"
    (root / "ldp").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "choices.py").write_text(
        "def names():\n    from dpcore.ldp.leaf import NAMES\n    return NAMES\n")
    (root / "ldp" / "__init__.py").write_text("from dpcore.ldp.heavy import run\n")
    (root / "ldp" / "leaf.py").write_text("NAMES = ('a',)\n")
    (root / "ldp" / "heavy.py").write_text("from dpcore.choices import names\nrun = 1\n")
    modules = module_files(tmp_path)
    assert find_cycles(import_graph(modules)) == []
    graph = package_graph(modules)
    assert graph["dpcore.choices"] == {"dpcore.ldp", "dpcore.ldp.leaf"}
    assert graph["dpcore.ldp.heavy"] == {"dpcore.choices"}  # dpcore.ldp is its own package
    assert find_cycles(graph) == [["dpcore.choices", "dpcore.ldp", "dpcore.ldp.heavy"]]


def test_the_configs_import_only_leaf_modules() -> None:
    """What importing :mod:`dpcore.config` runs holds no module that imports the configs
    back, even for types only: the allowed names come from the registries' leaf modules."""
    modules = module_files()
    graph, full = package_graph(modules), import_graph(modules)
    reached, todo = set(), ["dpcore.config"]
    while todo:
        for nxt in graph[todo.pop()] - reached:
            reached.add(nxt)
            todo.append(nxt)
    config = {m for m in modules if m == "dpcore.config" or m.startswith("dpcore.config.")}
    back = sorted(m for m in reached - config if full[m] & config)
    assert not back, "modules the configs import that import the configs: " + ", ".join(back)


def test_no_private_name_is_imported_across_packages() -> None:
    modules = module_files()
    offences = []
    for name, path in modules.items():
        own = name.split(".")[0]
        for target, imported, line in imports_of(name, path, modules):
            if target.split(".")[0] not in PACKAGES or target.split(".")[0] == own:
                continue
            private_part = [p for p in [*target.split("."), imported]
                            if p.startswith("_") and not p.startswith("__")]
            if private_part:
                offences.append(f"{path.relative_to(REPO)}:{line}: {target} {imported}")
    assert not offences, "private imports across packages:\n" + "\n".join(offences)


@pytest.mark.parametrize("package", PACKAGES)
def test_dependencies_point_one_way(package: str) -> None:
    modules = module_files()
    graph = import_graph(modules)
    wrong = sorted(
        f"{name} -> {target}" for name, targets in graph.items()
        if name.split(".")[0] == package for target in targets
        if target.split(".")[0] not in ALLOWED[package] | {package}
    )
    assert not wrong, f"{package} imports what it must not:\n" + "\n".join(wrong)


#: Where the bench's code may import a module by a computed name (``importlib.import_module``
#: or ``__import__``), as (file, enclosing function): the backend by its name (the only
#: mapping from a backend name to a package), a data loader of dpcore's own package, the
#: CLI's sub-command modules (names listed in SUBCOMMAND_MODULES, checked below), and the
#: benchmarks' two modules the compare layer reaches by name: the bench's entry module and
#: the framework-free grid-cost estimate (checked below to load no framework).
DYNAMIC_IMPORTS: set[tuple[str, str]] = {
    ("dpcore/backend.py", "load_backend"),
    ("dpcore/data/loaders/__init__.py", "get_loader"),
    ("compare/cli/main.py", "build_parser"),
    ("compare/bench.py", "load_benchmarks"),
    ("compare/bench.py", "load_grid_cost"),
}


def dynamic_imports(path: Path) -> Iterator[tuple[str, int]]:
    """(innermost enclosing function, line) of every call of ``importlib.import_module``,
    ``import_module`` or ``__import__`` in the file ("" at module level)."""

    def visit(node: ast.AST, owner: str) -> Iterator[tuple[str, int]]:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            owner = node.name
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__"):
                yield owner, node.lineno
        for child in ast.iter_child_nodes(node):
            yield from visit(child, owner)

    yield from visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), "")


def test_dynamic_imports_are_only_the_declared_ones() -> None:
    found = {(path.relative_to(REPO).as_posix(), owner): line
             for path in module_files().values() for owner, line in dynamic_imports(path)}
    unexpected = sorted(f"{file}:{line} ({owner or 'module level'})"
                        for (file, owner), line in found.items()
                        if (file, owner) not in DYNAMIC_IMPORTS)
    assert not unexpected, "dynamic imports besides the declared ones:\n" + "\n".join(unexpected)
    assert set(found) == DYNAMIC_IMPORTS  # every declared one still exists


def test_the_cli_imports_only_its_own_subcommand_modules() -> None:
    from compare.cli.main import SUBCOMMAND_MODULES

    assert all(m.startswith("compare.cli.") for m in SUBCOMMAND_MODULES), SUBCOMMAND_MODULES


def test_the_layering_test_sees_a_backend_import_in_compare(tmp_path: Path) -> None:
    """A compare module importing a backend, lazily inside a function, is an edge that the
    layering forbids (the graph is read from import statements, not from string literals)."""
    (tmp_path / "compare").mkdir()
    (tmp_path / "tfpipe").mkdir()
    (tmp_path / "compare" / "__init__.py").write_text("")
    (tmp_path / "tfpipe" / "__init__.py").write_text("")
    (tmp_path / "tfpipe" / "accounting.py").write_text("X = 1\n")
    (tmp_path / "compare" / "api.py").write_text(
        "def f():\n    from tfpipe.accounting import X\n    return X\n")
    graph = import_graph(module_files(tmp_path))
    assert graph["compare.api"] == {"tfpipe.accounting"}
    assert "tfpipe" not in ALLOWED["compare"] and "torchpipe" not in ALLOWED["compare"]


def framework_imports(root: Path = REPO, packages: tuple[str, ...] = FRAMEWORK_FREE
                      ) -> list[str]:
    """``file:line module`` of every import statement of a framework (:data:`FRAMEWORKS`) in
    ``packages``, lazy ones inside functions included."""
    modules = module_files(root)
    found = []
    for name, path in modules.items():
        if name.split(".")[0] not in packages:
            continue
        for target, _, line in imports_of(name, path, modules):
            if target.split(".")[0] in FRAMEWORKS:
                found.append(f"{path.relative_to(root).as_posix()}:{line} {target}")
    return found


def test_neither_dpcore_nor_compare_imports_a_framework() -> None:
    offences = framework_imports()
    assert not offences, "framework imports outside the backends:\n" + "\n".join(offences)


def test_the_framework_check_sees_a_lazy_framework_import_in_compare(tmp_path: Path) -> None:
    """An import of TF Privacy inside a function of a compare module is found; so is a plain
    ``import torch`` at module level."""
    (tmp_path / "compare").mkdir()
    (tmp_path / "compare" / "__init__.py").write_text("")
    (tmp_path / "compare" / "audit.py").write_text(
        "def attack():\n    from tensorflow_privacy.privacy import x\n    return x\n")
    (tmp_path / "compare" / "model.py").write_text("import torch.nn\n")
    assert framework_imports(tmp_path) == [
        "compare/audit.py:2 tensorflow_privacy.privacy", "compare/model.py:1 torch.nn"]


def test_importing_every_compare_module_loads_no_framework_backend_or_benchmark() -> None:
    """At run time too: importing every module of compare (the CLI's parser built) leaves
    the frameworks, the backends and the benchmarks unloaded until a command needs them."""
    names = sorted(n for n in module_files() if n.split(".")[0] == "compare")
    code = ("import importlib, sys\n"
            f"for name in {names!r}:\n"
            "    importlib.import_module(name)\n"
            "from compare.cli.main import build_parser\n"
            "build_parser()\n"
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & "
            f"{{*{FRAMEWORKS!r}, 'tfpipe', 'torchpipe', 'benchmarks'}}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_grid_cost_estimate_the_dry_run_loads_imports_no_framework_or_backend() -> None:
    """A grid's dry run loads :mod:`benchmarks.grid_cost` by name
    (:func:`compare.bench.load_grid_cost`): it must stay framework-free, so that a dry run
    loads no framework."""
    code = ("import sys\n"
            "from compare.bench import load_grid_cost\n"
            "load_grid_cost()\n"
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & "
            f"{{*{FRAMEWORKS!r}, 'tfpipe', 'torchpipe'}}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
