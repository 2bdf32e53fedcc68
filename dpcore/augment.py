"""Per-example augmentation of training images, the same on both backends (numpy only).

:func:`dpcore.trainloop.run_training` calls :func:`augment_batch` on each logical training
batch drawn by the shared sampler, before the batch is converted to model inputs and split
into physical chunks. The generator of step ``t`` is :func:`augment_rng` of ``(config.seed,
t)``: the TF and the torch run of one configuration see byte-identical augmented images in
every step, and a rerun sees them again. Evaluation never goes through this module.

Written by hand in numpy on purpose: the frameworks' augmentation layers (Keras
``RandomFlip``/``RandomCrop``, torchvision transforms) draw from their own framework's random
generator, so the two backends would train on different images; no library offers seeded,
per-example flips and crops on numpy arrays that both backends can share.

Privacy: each output image depends on one input image (and on randomness independent of the
data), so per-example clipping bounds its influence exactly as before; see
:class:`dpcore.config.AugmentSpec`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpcore.config import AugmentSpec
from dpcore.data.dataset import Dataset
from dpcore.errors import ConfigError

#: Stream constant of the augmentation generator (independent of the sampler's, the noise's
#: and the initialiser's streams of the same run seed).
AUGMENT_STREAM = 0xA06


@dataclass(frozen=True)
class AugmentDraw:
    """The random choices of one batch's augmentation, one entry per example.

    Attributes:
        flip: bool [N], True where the image is flipped left-right.
        offset_y: int [N] in ``[0, 2p]``: first row of the crop window in the padded image
            (``p`` = ``crop_padding``; ``p`` keeps the image in place).
        offset_x: int [N] in ``[0, 2p]``: first column of the crop window, likewise.
    """

    flip: np.ndarray
    offset_y: np.ndarray
    offset_x: np.ndarray


def augment_rng(seed: int, step: int) -> np.random.Generator:
    """The generator of training step ``step`` (1-based) of a run with seed ``seed``."""
    return np.random.default_rng([int(seed), AUGMENT_STREAM, int(step)])


def draw_augment(n: int, spec: AugmentSpec, rng: np.random.Generator) -> AugmentDraw:
    """Draw the choices for ``n`` examples: first the flips (if ``spec.hflip``), then the
    row offsets, then the column offsets (if ``spec.crop_padding``); nothing is drawn for an
    augmentation that is off, so each draw is fixed by the spec and the generator."""
    flip = rng.random(n) < 0.5 if spec.hflip else np.zeros(n, dtype=bool)
    p = spec.crop_padding
    if p > 0:
        offset_y = rng.integers(0, 2 * p + 1, size=n)
        offset_x = rng.integers(0, 2 * p + 1, size=n)
    else:
        offset_y = offset_x = np.zeros(n, dtype=np.int64)
    return AugmentDraw(flip=flip, offset_y=offset_y, offset_x=offset_x)


def apply_augment(images: np.ndarray, spec: AugmentSpec, draw: AugmentDraw) -> np.ndarray:
    """Apply the drawn crop, then the drawn flip, to each image of an NHWC batch.

    Returns a new array of the same shape and dtype (``images`` is not modified).
    """
    n, h, w = images.shape[:3]
    p = spec.crop_padding
    if p > 0:
        padded = np.pad(images, ((0, 0), (p, p), (p, p), (0, 0)))  # zeros, same dtype
        out = np.empty_like(images)
        for i in range(n):
            y, x = int(draw.offset_y[i]), int(draw.offset_x[i])
            out[i] = padded[i, y:y + h, x:x + w]
    else:
        out = images.copy()
    if spec.hflip and draw.flip.any():
        out[draw.flip] = out[draw.flip][:, :, ::-1]
    return out


def augment_batch(images: np.ndarray, spec: AugmentSpec, rng: np.random.Generator
                  ) -> np.ndarray:
    """The batch with each image independently cropped and/or flipped as ``spec`` asks.

    Args:
        images: NHWC batch, ``uint8`` (0..255) or float32; may be empty.
        spec: which augmentations (``crop_padding`` must be below the image's height and
            width, see :func:`check_augment_data`).
        rng: the step's generator (:func:`augment_rng`); the output is a function of the
            images, the spec and the generator's state only.

    Returns:
        Same shape and dtype; ``images`` itself when ``spec`` asks for nothing.

    Raises:
        ValueError: ``images`` is not 4-D (NHWC).
    """
    if images.ndim != 4:
        raise ValueError(f"augment_batch needs an NHWC batch of images (4-D); got shape "
                         f"{images.shape}")
    if not spec.active:
        return images
    return apply_augment(images, spec, draw_augment(len(images), spec, rng))


def check_augment_data(spec: AugmentSpec, dataset: Dataset) -> None:
    """Refuse augmentation a data set cannot take (call before training).

    Raises:
        ConfigError: augmentation on a text data set (token ids have no left and right, and
            no pixels to pad), or ``crop_padding`` not smaller than the image's height and
            width (some crops would hold no pixel of the image).
    """
    if not spec.active:
        return
    if dataset.task != "image":
        key, value = next(iter(spec.non_default().items()))
        raise ConfigError(
            f"augment.{key}={value!r} needs an image data set; {dataset.name!r} is "
            f"{dataset.task} (token ids cannot be flipped or cropped); valid for it: no "
            "augment section (hflip false, crop_padding 0)"
        )
    h, w = dataset.input_shape[:2]
    if spec.crop_padding >= min(h, w):
        raise ConfigError(
            f"augment.crop_padding={spec.crop_padding} is not smaller than the images "
            f"({h}x{w} pixels) of {dataset.name!r}: some crops would hold no pixel of the "
            f"image; valid: an integer in [0, {min(h, w) - 1}]"
        )
