"""The random part of a private selection (Papernot & Steinke 2022): draw K and a candidate
per repetition, noise each repetition's score, pick the best noised score.

Everything here is a function of the law, the number of candidates and one seed, never of the
data, except the exact scores handed in. The exact scores are for the reader only: the winner
is chosen on the noised ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpcore.errors import ConfigError
from dpcore.tuning.bound import ScoreMechanism
from dpcore.tuning.laws import RepetitionLaw


@dataclass
class SelectionDraws:
    """One seeded run of the protocol's randomness.

    Attributes:
        law: the law of K.
        n_candidates: the grid's size; each repetition draws one uniformly.
        seed: seeds the one numpy Generator that draws K, then the K candidates, then (one per
            repetition, in order) the score noises.
    """

    law: RepetitionLaw
    n_candidates: int
    seed: int

    def __post_init__(self) -> None:
        if self.n_candidates < 1:
            raise ConfigError(f"n_candidates={self.n_candidates!r}; valid: >= 1")
        self._rng = np.random.default_rng(self.seed)
        self.k = self.law.sample(self._rng)
        self.candidates: tuple[int, ...] = tuple(
            int(i) for i in self._rng.integers(0, self.n_candidates, size=self.k))

    def noised(self, exact: float | None, score: ScoreMechanism) -> float:
        """The released score of one repetition (call once per repetition, in order): the exact
        score (0 for a run that diverged and has none) plus Gaussian noise of
        ``score.noise_std``."""
        value = 0.0 if exact is None else float(exact)
        return value + float(self._rng.normal(0.0, score.noise_std))


def winner(noised_scores: Sequence[float]) -> int | None:
    """Index of the best noised score (the first on ties); None when no repetition ran
    (K = 0 under a Poisson law: the selection releases nothing)."""
    if not noised_scores:
        return None
    return int(np.argmax(np.asarray(noised_scores, dtype=float)))


__all__ = ["SelectionDraws", "winner"]
