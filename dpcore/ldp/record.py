"""The typed record of a locally privatised data set: what was done to it and what it costs.

:func:`dpcore.ldp.privatize.privatize_dataset` returns its Dataset with an :class:`LdpRecord` in
``Dataset.ldp`` (typed, beside the arrays, never as text in ``Dataset.extra``);
:func:`dpcore.pipeline.prepare_dataset` adds the epsilons at the run's delta and the image
quality. The record's :attr:`LdpRecord.dp_event` (releasing one image: the neighbour level
that protects a person) is the event the run's privacy plan carries, so a local-DP run's
epsilon comes from the same ledger (dp_accounting) as a DP-SGD run's.

This module imports neither :mod:`dpcore.data` nor the mechanisms (no import cycle).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import dp_accounting

from dpcore.accounting import event_to_dict


@dataclass(frozen=True)
class LdpQuality:
    """How visible the privatised test images still are (against the originals).

    Attributes:
        psnr: peak signal-to-noise ratio, dB (higher = closer to the original).
        ssim: structural similarity in [-1, 1] (1 = identical).
        n_images: how many test images were compared (a seeded subset).
    """

    psnr: float
    ssim: float
    n_images: int


@dataclass(frozen=True)
class LdpRecord:
    """What local DP did to a data set, typed.

    Attributes:
        mechanism: registry name of the mechanism (``laplace``, ``gaussian``, ``dp_pix``).
        params: its parameters (what ``build_mechanism`` accepts).
        seed: the noise seed.
        splits: which splits were noised (``train``, ``test``).
        source_fingerprint: fingerprint of the clean data set.
        privatised_fingerprint: fingerprint of the noised data set.
        cache_file: path of the cached noised copy; empty when none was written.
        dp_event: dp_accounting event of releasing one privatised image at the level that
            protects a person (the whole image).
        epsilons: :meth:`~dpcore.ldp.mechanisms.LdpMechanism.epsilons` at the run's delta
            (``per_value``, ``per_image``, ... entries), once known.
        quality: image quality of the noised test images, once measured.
    """

    mechanism: str
    params: Mapping[str, Any]
    seed: int
    splits: tuple[str, ...]
    source_fingerprint: str
    privatised_fingerprint: str
    cache_file: str
    dp_event: dp_accounting.DpEvent
    epsilons: Mapping[str, Any] = field(default_factory=dict)
    quality: LdpQuality | None = None

    def to_dict(self) -> dict[str, Any]:
        """The RunResult ``privacy.ldp`` entry.

        The keys and their meaning are those the results have always had (reports read
        ``epsilon_per_value``, ``epsilon_per_image``, ``psnr``, ``ssim``); ``dp_event`` is
        new (dp_accounting's named-tuple form).
        """
        eps = self.epsilons
        per_value = eps.get("per_value") or {}
        per_image = eps.get("per_image") or {}
        per_m = eps.get("per_m_neighbourhood") or {}
        out: dict[str, Any] = {
            "ldp_mechanism": self.mechanism,
            "ldp_params": json.dumps(dict(self.params), sort_keys=True),
            "ldp_seed": str(self.seed),
            "ldp_splits": ",".join(self.splits),
            "ldp_cache_file": self.cache_file,
            "source_fingerprint": self.source_fingerprint,
            "privatised_fingerprint": self.privatised_fingerprint,
            "dp_event": event_to_dict(self.dp_event),
        }
        if eps:
            out.update({
                "mechanism": eps.get("mechanism", self.mechanism),
                "params": dict(eps.get("params", self.params)),
                "epsilon_per_value": per_value.get("epsilon"),
                "delta_per_value": per_value.get("delta"),
                "epsilon_per_image": per_image.get("epsilon"),
                "delta_per_image": per_image.get("delta"),
                "epsilon_per_m_neighbourhood": per_m.get("epsilon"),
                "protects": eps.get("protects"),
            })
        if self.quality is not None:
            out.update(psnr=self.quality.psnr, ssim=self.quality.ssim,
                       quality_images=self.quality.n_images)
        return out
