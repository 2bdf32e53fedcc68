"""The random number of repetitions K of a private hyper-parameter selection.

Papernot & Steinke 2022 ("Hyperparameter tuning with Renyi differential privacy", ICLR 2022)
bound the privacy of "run a randomised number K of repetitions, release the best" when K is
drawn from one of two families, chosen before any data is seen:

* ``truncated-negative-binomial`` (their Section 3, Theorem 2): for eta > 0,
  P[K = k] proportional to C(k + eta - 1, k) (1 - gamma)^k for k >= 1; eta = 1 is the geometric
  law, eta = 0 the logarithmic law (P[K = k] proportional to (1 - gamma)^k / k);
  E[K] = eta (1 - gamma) / (gamma (1 - gamma^eta)) for eta > 0 and
  (1/gamma - 1) / log(1/gamma) for eta = 0; gamma = 1 is K = 1 always.
* ``poisson`` (their Theorem 6): K ~ Poisson(mu), E[K] = mu; K = 0 releases nothing.

:class:`RepetitionLaw` holds one law, draws K from a numpy Generator, and names the
``shape`` dp_accounting's ``RepeatAndSelectDpEvent`` takes (eta, or infinity for Poisson).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpcore.errors import ConfigError

TNB = "truncated-negative-binomial"
POISSON = "poisson"
LAW_KINDS = (TNB, POISSON)


@dataclass(frozen=True)
class RepetitionLaw:
    """The law of the number of repetitions K.

    Attributes:
        kind: ``truncated-negative-binomial`` or ``poisson``.
        eta: the truncated negative binomial's shape, >= 0 (1: geometric, 0: logarithmic).
        gamma: its success probability, in (0, 1]; 1 means K = 1 always.
        mu: the Poisson mean, > 0.
    """

    kind: str
    eta: float | None = None
    gamma: float | None = None
    mu: float | None = None

    def __post_init__(self) -> None:
        if self.kind == TNB:
            if self.eta is None or not math.isfinite(self.eta) or self.eta < 0:
                raise ConfigError(f"selection law eta={self.eta!r} is not valid; valid: a "
                                  "finite number >= 0 (1: geometric, 0: logarithmic)")
            if self.gamma is None or not 0 < self.gamma <= 1:
                raise ConfigError(f"selection law gamma={self.gamma!r} is not valid; valid: "
                                  "a number in (0, 1]")
            if self.mu is not None:
                raise ConfigError(f"selection law {TNB} takes eta and gamma, not mu")
        elif self.kind == POISSON:
            if self.mu is None or not math.isfinite(self.mu) or self.mu <= 0:
                raise ConfigError(f"selection law mu={self.mu!r} is not valid; valid: a "
                                  "finite number > 0")
            if self.eta is not None or self.gamma is not None:
                raise ConfigError(f"selection law {POISSON} takes mu, not eta or gamma")
        else:
            raise ConfigError(f"selection law {self.kind!r} is not known; valid: "
                              f"{', '.join(LAW_KINDS)}")

    @classmethod
    def truncated_negative_binomial(cls, eta: float, gamma: float) -> RepetitionLaw:
        return cls(TNB, eta=float(eta), gamma=float(gamma))

    @classmethod
    def poisson(cls, mu: float) -> RepetitionLaw:
        return cls(POISSON, mu=float(mu))

    @property
    def mean(self) -> float:
        """E[K]."""
        if self.kind == POISSON:
            assert self.mu is not None
            return self.mu
        assert self.eta is not None and self.gamma is not None
        eta, gamma = self.eta, self.gamma
        if gamma == 1:
            return 1.0
        if eta == 0:
            return (1 / gamma - 1) / math.log(1 / gamma)
        return eta * (1 - gamma) / (gamma * (1 - gamma ** eta))

    @property
    def shape(self) -> float:
        """dp_accounting's ``RepeatAndSelectDpEvent.shape``: eta, or infinity for Poisson."""
        return math.inf if self.kind == POISSON else float(self.eta or 0.0)

    def sample(self, rng: np.random.Generator) -> int:
        """One draw of K (>= 1 for the truncated negative binomial, >= 0 for Poisson)."""
        if self.kind == POISSON:
            return int(rng.poisson(self.mu))
        assert self.eta is not None and self.gamma is not None
        if self.gamma == 1:
            return 1
        if self.eta == 0:
            return int(rng.logseries(1 - self.gamma))
        while True:  # numpy's negative binomial counts failures (k >= 0): truncate at 0
            k = int(rng.negative_binomial(self.eta, self.gamma))
            if k >= 1:
                return k

    def describe(self) -> str:
        """E.g. ``"truncated negative binomial, eta=1, gamma=0.1, E[K]=10"``."""
        if self.kind == POISSON:
            return f"Poisson, mu={self.mu:g}, E[K]={self.mean:.3g}"
        return (f"truncated negative binomial, eta={self.eta:g}, gamma={self.gamma:g}, "
                f"E[K]={self.mean:.3g}")

    def to_dict(self) -> dict[str, Any]:
        if self.kind == POISSON:
            return {"kind": POISSON, "mu": self.mu}
        return {"kind": TNB, "eta": self.eta, "gamma": self.gamma}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> RepetitionLaw:
        """The law of a mapping ``{kind, eta, gamma}`` or ``{kind, mu}``."""
        if not isinstance(raw, Mapping):
            raise ConfigError(f"selection law must be a mapping, got {raw!r}")
        unknown = set(raw) - {"kind", "eta", "gamma", "mu"}
        if unknown:
            raise ConfigError(f"selection law: unknown keys {sorted(unknown)}; valid: kind, "
                              "eta, gamma (truncated-negative-binomial) or mu (poisson)")
        try:
            return cls(str(raw.get("kind")),
                       **{k: float(raw[k]) for k in ("eta", "gamma", "mu") if k in raw})
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"selection law {dict(raw)!r}: {exc}") from exc


def parse_law(text: str) -> RepetitionLaw:
    """A law written ``tnb:ETA:GAMMA`` or ``poisson:MU`` (the command-line form)."""
    parts = text.strip().split(":")
    try:
        if parts[0] in ("tnb", TNB) and len(parts) == 3:
            return RepetitionLaw.truncated_negative_binomial(float(parts[1]), float(parts[2]))
        if parts[0] == POISSON and len(parts) == 2:
            return RepetitionLaw.poisson(float(parts[1]))
    except ValueError:
        pass
    raise ConfigError(f"selection law {text!r} is not valid; valid: tnb:ETA:GAMMA (e.g. "
                      "tnb:1:0.1, geometric with E[K] = 10) or poisson:MU (e.g. poisson:10)")


__all__ = ["LAW_KINDS", "POISSON", "TNB", "RepetitionLaw", "parse_law"]
