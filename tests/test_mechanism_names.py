"""No code outside the registry compares a privacy mechanism's name.

Every module of dpcore, compare, tfpipe and torchpipe is parsed; a comparison (``==``, ``!=``,
``in``, ``not in``), a ``startswith`` / ``endswith`` / ``isin`` call or a dict key against a
registered mechanism name is an error outside :mod:`dpcore.mechanisms`: such code must ask the
registry (an attribute of :class:`dpcore.mechanisms.DpSgdMechanism`, or one of its lookup
functions) so that a new mechanism needs no change there.

``none`` and ``ldp`` are common words (``fault == "none"``), so they count only when the other
side of the comparison mentions ``mechanism``; the DP-SGD names (and the ``dpsgd`` prefix)
always count.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from dpcore.mechanisms import DP_MECHANISMS

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dpcore", "compare", "tfpipe", "torchpipe")
REGISTRY = ROOT / "dpcore" / "mechanisms.py"
#: Names that are also ordinary words: flagged only next to the word ``mechanism``.
COMMON_WORDS = {"none", "ldp"}
_COMPARE_OPS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)
_STRING_TESTS = {"startswith", "endswith", "isin"}


def _names() -> set[str]:
    return set(DP_MECHANISMS) | {"dpsgd"}


def _strings(node: ast.AST) -> Iterator[str]:
    """String constants of ``node`` itself or of the tuple / list / set it is."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, ast.Tuple | ast.List | ast.Set):
        for element in node.elts:
            yield from _strings(element)


def _is_mechanism_name(text: str, context: ast.AST | None) -> bool:
    if text in COMMON_WORDS:
        return context is not None and "mechanism" in ast.unparse(context).lower()
    return text in _names() or text.startswith("dpsgd")


def offences(source: str, filename: str = "<source>") -> list[str]:
    """``file:line: code`` of every mechanism-name comparison in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        hits: list[tuple[str, ast.AST | None]] = []
        if isinstance(node, ast.Compare) and any(isinstance(o, _COMPARE_OPS)
                                                 for o in node.ops):
            operands = [node.left, *node.comparators]
            for i, operand in enumerate(operands):
                others = ast.Tuple([o for j, o in enumerate(operands) if j != i], ast.Load())
                hits += [(text, others) for text in _strings(operand)]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in _STRING_TESTS:
            hits += [(text, node.func.value) for arg in node.args for text in _strings(arg)]
        elif isinstance(node, ast.Dict):
            hits += [(text, None) for key in node.keys if key is not None
                     for text in _strings(key)]
        if any(_is_mechanism_name(text, context) for text, context in hits):
            found.append(f"{filename}:{getattr(node, 'lineno', '?')}: "
                         f"{ast.unparse(node)[:90]}")
    return found


def _modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py")
                  if p != REGISTRY)


def test_the_scanner_finds_each_kind_of_comparison_and_only_those() -> None:
    bad = '''
if privacy.mechanism == "dpsgd-gaussian": pass
if m in ("dpsgd-gaussian", "dpsgd-laplace"): pass
ok = frame["mechanism"].astype(str).str.startswith("dpsgd")
if plan.mechanism != "none": pass
if "ldp" == config.privacy.mechanism: pass
MARKERS = {"dpsgd-laplace": "s"}
'''
    assert len(offences(bad)) == 6
    fine = '''
if fault == "none": pass
if kind in ("l2", "l1"): pass
if engine != "ldp-cache": pass
name = "dpsgd-gaussian"
'''
    assert offences(fine) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_mechanism_name_is_compared_outside_the_registry(package: str) -> None:
    found = [hit for path in _modules() if path.relative_to(ROOT).parts[0] == package
             for hit in offences(path.read_text(encoding="utf-8"),
                                 str(path.relative_to(ROOT)))]
    assert found == [], "compare through dpcore.mechanisms instead:\n" + "\n".join(found)
