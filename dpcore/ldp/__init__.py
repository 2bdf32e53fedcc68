"""Local differential privacy on images: each image is perturbed before any training.

The trainer never sees an original image. Mechanisms (:data:`LDP_MECHANISMS`: ``laplace``,
``gaussian``, ``dp_pix``) state their epsilon per pixel value and per image (the per-image one
is what protects a patient's image) and their dp_accounting DpEvent;
:func:`privatize_dataset` writes the noised copy of a data set once and reuses it.

Submodules not imported here (they load scikit-image / matplotlib): :mod:`dpcore.ldp.quality`
(PSNR, SSIM) and :mod:`dpcore.ldp.montage` (PNG montage).
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
from dpcore.ldp.privatize import (
    SPLITS,
    cache_path_for,
    image_rng,
    privatize_dataset,
    privatize_images,
)

__all__ = [
    "LDP_MECHANISMS",
    "PROTECTS",
    "SPLITS",
    "DpPixMechanism",
    "GaussianMechanism",
    "LaplaceMechanism",
    "LdpMechanism",
    "analytic_gaussian_epsilon",
    "build_mechanism",
    "cache_path_for",
    "image_rng",
    "privatize_dataset",
    "privatize_images",
]
