"""The final weights a report keeps of its shared-noise runs, so that the relative difference
of the two backends' weights is computed from records alone.

Runs with ``privacy.noise_source: shared`` are trained to be compared weight for weight (both
backends add the same noise vector, :mod:`dpcore.shared_noise`); their report's "Framework
equivalence" section shows ``||w_tf - w_torch|| / ||w_torch||`` per seed pair, in the neutral
layout. A report rebuilt from ``records/`` has no checkpoint, so the final weights are kept in
``records/weights/<run id>.npz`` (compressed, byte-identical for the same arrays):

* the weights themselves as float32 when they take at most :data:`MAX_FULL_BYTES` (cnn4 on
  MNIST: 26,010 parameters, ~104 kB raw, ~96 kB compressed per run);
* else their projection onto :data:`PROJECTION_DIRECTIONS` seeded Gaussian directions (the
  same for every run: a Johnson-Lindenstrauss sketch; the ratio of the projected norms then
  estimates the relative difference within a few per cent, :func:`relative_difference` says
  which it is).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from compare.exact_sums import exact_norm
from dpcore.errors import CheckpointChangedError, DpCompareError
from dpcore.io import read_npz, write_npz
from dpcore.results import RunResult
from dpcore.trained import read_checkpoint, recorded_checkpoint

__all__ = ["FinalWeights", "MAX_FULL_BYTES", "PROJECTION_DIRECTIONS", "WEIGHTS_FOLDER",
           "collect_final_weights", "compact_weights", "keeps_final_weights",
           "load_final_weights", "relative_difference", "save_final_weights"]

#: Folder of ``REPORT/records/`` holding the final weights (one npz per run id).
WEIGHTS_FOLDER = "weights"
#: Largest float32 size (bytes) of a run's weights kept in full; above it, a projection.
MAX_FULL_BYTES = 1_000_000
#: Directions of the Johnson-Lindenstrauss projection of larger models.
PROJECTION_DIRECTIONS = 512
#: Seed of the projection's directions (fixed: every run is projected onto the same ones).
PROJECTION_SEED = 31
#: Parameters per block of the projection (memory: directions x block float32 = 16 MB).
_BLOCK = 8192


@dataclass(frozen=True)
class FinalWeights:
    """One run's final weights as a report keeps them.

    Attributes:
        kind: ``"weights"`` (``arrays`` are the neutral-layout weights, float32) or
            ``"projection"`` (``arrays["projection"]``: the flat weights in sorted key order
            times a seeded Gaussian matrix of :data:`PROJECTION_DIRECTIONS` rows, entries
            N(0, 1 / directions)).
        parameters: number of weights of the model.
    """

    kind: str
    parameters: int
    arrays: Mapping[str, np.ndarray] = field(default_factory=dict)

    def vector(self) -> np.ndarray:
        """The flat float64 vector compared (weights in sorted key order, or the projection)."""
        return np.concatenate([np.asarray(self.arrays[k], np.float64).ravel()
                               for k in sorted(self.arrays)])


def keeps_final_weights(result: RunResult) -> bool:
    """True for a finished run whose final weights the report keeps: one trained with
    ``privacy.noise_source: shared``."""
    privacy = (result.config or {}).get("privacy") or {}
    return result.status == "finished" and privacy.get("noise_source") == "shared"


def compact_weights(weights: Mapping[str, np.ndarray]) -> FinalWeights:
    """``weights`` (neutral layout) as kept: in full up to :data:`MAX_FULL_BYTES`, else
    projected (see the module docstring)."""
    keys = sorted(weights)
    parameters = int(sum(np.asarray(weights[k]).size for k in keys))
    if parameters * 4 <= MAX_FULL_BYTES:
        return FinalWeights("weights", parameters,
                            {k: np.asarray(weights[k], np.float32) for k in keys})
    flat = np.concatenate([np.asarray(weights[k], np.float32).ravel() for k in keys])
    rng = np.random.Generator(np.random.Philox(PROJECTION_SEED))
    projection = np.zeros(PROJECTION_DIRECTIONS, np.float64)
    for start in range(0, parameters, _BLOCK):
        block = flat[start:start + _BLOCK]
        directions = rng.standard_normal((PROJECTION_DIRECTIONS, len(block)), np.float32)
        projection += directions.astype(np.float64) @ block.astype(np.float64)
    projection /= math.sqrt(PROJECTION_DIRECTIONS)
    return FinalWeights("projection", parameters, {"projection": projection.astype(np.float32)})


def save_final_weights(path: str | Path, weights: FinalWeights) -> Path:
    """Write ``weights`` as one compressed npz (byte-identical for the same arrays)."""
    write_npz(path, dict(weights.arrays), {"kind": weights.kind,
                                           "parameters": weights.parameters},
              compressed=True)
    return Path(path)


def load_final_weights(path: str | Path) -> FinalWeights:
    """The final weights stored at ``path``.

    Raises:
        DpCompareError: the file is missing or damaged (its path is named).
    """
    read = read_npz(path)
    if read is None or read[1].get("kind") not in ("weights", "projection"):
        raise DpCompareError(f"final weights {path} are missing or damaged; rewrite the "
                             "report with `dpcompare compare --report`")
    arrays, meta = read
    return FinalWeights(str(meta["kind"]), int(meta["parameters"]), arrays)


def relative_difference(a: FinalWeights, b: FinalWeights) -> tuple[float, str]:
    """``||a - b|| / ||b||`` and how it was computed: ``"exact"`` from the weights, or
    ``"JL estimate"`` from the projections (NaN when the two were kept differently or
    ``b`` is zero)."""
    if a.kind != b.kind or a.parameters != b.parameters or set(a.arrays) != set(b.arrays):
        return math.nan, "not comparable"
    va, vb = a.vector(), b.vector()
    norm = exact_norm(vb)  # the same bits on any machine (compare.exact_sums)
    value = exact_norm(va - vb) / norm if norm > 0 else math.nan
    return value, "exact" if a.kind == "weights" else "JL estimate"


def collect_final_weights(results: Sequence[RunResult], store_root: str | Path,
                          weight_folders: Iterable[str | Path] = ()
                          ) -> dict[str, FinalWeights]:
    """Run id -> final weights of every run of ``results`` that :func:`keeps_final_weights`:
    from its checkpoint in the store ``store_root``, else from the first of
    ``weight_folders`` (committed ``REPORT/records/weights`` folders) holding it (a run
    resumed from committed records). A run found in neither is left out (the section says
    so)."""
    folders = [Path(f) for f in weight_folders]
    out: dict[str, FinalWeights] = {}
    for result in results:
        if not keeps_final_weights(result):
            continue
        if result.checkpoint:
            try:
                out[result.run_id] = compact_weights(
                    read_checkpoint(recorded_checkpoint(store_root, result))[0])
                continue
            except CheckpointChangedError:
                raise  # not the run's weights: never reported as if they were
            except DpCompareError:
                pass
        for folder in folders:
            path = folder / f"{result.run_id}.npz"
            if path.is_file():
                out[result.run_id] = load_final_weights(path)
                break
    return out
