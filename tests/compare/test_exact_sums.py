"""The report figures computed from arrays (relative weight difference, Grad-CAM correlation)
are the same bits whatever the machine's BLAS thread count: a committed report rebuilds to the
same bytes on a machine with another number of cores (compare.exact_sums)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from compare.exact_sums import exact_norm, exact_pearson

ROOT = Path(__file__).resolve().parents[2]

#: Prints the two figures for vectors long enough that BLAS splits its sums over threads
#: (np.linalg.norm gave 9.999588304391587e-05 with one OpenBLAS thread, ...624e-05 with two).
FIGURES = """
import numpy as np
from compare.final_weights import FinalWeights, relative_difference
from compare.reporting.equivalence_section import gradcam_pearson
rng = np.random.default_rng(0)
a = rng.standard_normal(300_000).astype(np.float32)
b = a + 1e-4 * rng.standard_normal(a.size).astype(np.float32)
first = FinalWeights("weights", a.size, {"w": a})
second = FinalWeights("weights", b.size, {"w": b})
maps = rng.random((2, 300, 300))
print(repr(relative_difference(first, second)[0]),
      repr(gradcam_pearson(maps, maps + 0.01 * rng.random(maps.shape))))
# what the report computed before (BLAS): tells whether this machine's BLAS splits the sums
va, vb = first.vector(), second.vector()
print(repr(float(np.linalg.norm(va - vb) / np.linalg.norm(vb))))
"""


def _figures(threads: int) -> str:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads),
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", FIGURES], env=env, cwd=ROOT, text=True,
                          capture_output=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_figures_do_not_depend_on_the_blas_thread_count() -> None:
    one, two = _figures(1).splitlines(), _figures(2).splitlines()
    if one[1] == two[1]:
        pytest.skip("this machine's BLAS gives the same bits with 1 and 2 threads (one core?), "
                    "so the thread count cannot change a figure here: nothing to compare")
    assert one[0] == two[0]


def test_exact_norm_and_pearson_agree_with_numpy() -> None:
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(1000), rng.standard_normal(1000)
    assert exact_norm(x) == pytest.approx(float(np.linalg.norm(x)), rel=1e-14)
    assert exact_norm(x.reshape(10, 100)) == exact_norm(x)
    assert exact_norm(np.zeros(3)) == 0.0
    squares = np.square(x)  # the sum of the rounded squares, rounded once: as Fractions
    assert exact_norm(x) == math.sqrt(float(sum(Fraction(v) for v in squares.tolist())))
    assert exact_pearson(x, 2 * x + 1) == pytest.approx(1.0, abs=1e-15)
    assert exact_pearson(x, y) == pytest.approx(float(np.corrcoef(x, y)[0, 1]), abs=1e-12)
    assert math.isnan(exact_pearson(np.ones(5), np.arange(5.0)))
    with pytest.raises(ValueError, match="arrays of 3 and 4 values"):
        exact_pearson(np.ones(3), np.ones(4))
