"""Local differential privacy on images: each image is perturbed before any training.

The trainer never sees an original image. Mechanisms (:data:`LDP_MECHANISMS`: ``laplace``,
``gaussian``, ``dp_pix``) state their epsilon per pixel value and per image (the per-image one
is what protects a patient's image) and their dp_accounting DpEvent. This package's surface is
the mechanisms (a leaf module: the configs read their names); its other modules are imported
by name: :mod:`dpcore.ldp.privatize` (``privatize_dataset`` writes the noised copy of a data
set once and reuses it; it reads the data layer), :mod:`dpcore.ldp.record` (the typed record),
:mod:`dpcore.ldp.quality` (PSNR, SSIM) and :mod:`dpcore.ldp.montage` (PNG montage; both load
scikit-image / matplotlib).
"""

from dpcore.ldp.mechanisms import (
    LDP_MECHANISMS,
    PROTECTS,
    DpPixMechanism,
    GaussianMechanism,
    LaplaceMechanism,
    LdpMechanism,
    analytic_gaussian_epsilon,
    build_mechanism,
)

__all__ = [
    "LDP_MECHANISMS",
    "PROTECTS",
    "DpPixMechanism",
    "GaussianMechanism",
    "LaplaceMechanism",
    "LdpMechanism",
    "analytic_gaussian_epsilon",
    "build_mechanism",
]
