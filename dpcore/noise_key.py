"""The key of a run's DP-SGD noise: the one place every noise generator gets its key from.

``privacy.noise_key`` says where the key comes from:

* ``seed`` (benchmarks on public data): derived from the run seed *and* the config hash,
  ``numpy.random.SeedSequence([seed, int(config_hash, 16), stream tag])``, so two configs with
  one seed never share a draw (they did when the key was the run seed alone: every config of a
  seed added the same standard-normal vector, scaled by its own sigma), and one config draws
  the same noise on every rerun (bit-reproducible). Anyone who knows the config and the seed
  (a record, a report) can rebuild the noise: harmless on public data.
* ``secret``: the key comes from the operating system's entropy (:mod:`secrets`, i.e.
  ``os.urandom``) when the run starts; it is kept nowhere (not in the record, the log or the
  checkpoint), so nobody can rebuild the noise, and the run is not bit-reproducible. Without
  it, one released model plus its printed seed gives the noise of every step, hence the
  noise-free gradient sums the guarantee hides. The default for every data set that is not a
  registered public one (``imagefolder:PATH``, ``medmnist:PATH``, ``data.path``).

Streams (:data:`STREAMS`): a backend engine's own generator (``engine``), the shared noise of
``privacy.noise_source: shared`` (``shared``), a library recipe's generator (``library``);
each gets an independent key. The frameworks' generators take the key as their seed:
TensorFlow's ``tf.random.Generator.from_seed`` writes a 192-bit seed into its Philox state
(counter and key), torch's ``Generator.manual_seed`` takes 64 bits (MT19937 on the CPU).

The floating-point side (what ``secret`` does about it, :func:`noise_sampler`): a Gaussian
sampler is exposed to the attacks of Jin et al. 2022 ("Are we there yet? Timing and
floating-point attacks on differential privacy systems", IEEE S&P), the textbook Laplace
sampler to Mironov 2012 ("On significance of the least significant bits for differential
privacy", CCS). A ``secret`` Gaussian step draws each coordinate as the sum of four Gaussian
draws divided by two (Holohan & Braghin 2021, "Secure random sampling in differential privacy",
section 5.1: the construction Opacus's ``secure_mode`` uses), which raises the cost of the
known attack; it is a mitigation, not a proof of DP in floating point. No sampler here is
proved safe for float gradients (the discrete Gaussian of Canonne, Kamath, Steinke 2020 needs
integer-valued sums; TF Privacy's vectorised version relaxes it to float parameters and says
so itself).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from dpcore.datasets import PATH_PREFIXES
from dpcore.errors import ConfigError


# The config sections this module reads, as protocols: dpcore.config imports this module (the
# hash and the checks), so it cannot import dpcore.config back, not even for type hints.
class DataSpec(Protocol):
    """What :func:`default_noise_key` reads of :class:`dpcore.config.DataSpec`."""

    name: str
    path: str | None


class PrivacySpec(Protocol):
    """What this module reads of :class:`dpcore.config.PrivacySpec`."""

    mechanism: str
    noise_source: str
    noise_key: str | None

    @property
    def is_dpsgd(self) -> bool: ...


class RunConfig(Protocol):
    """What this module reads of :class:`dpcore.config.RunConfig`."""

    data: DataSpec
    privacy: PrivacySpec
    seed: int
    recipe: str

    @property
    def config_hash(self) -> str: ...

__all__ = ["LEGACY_NOISE_KEY", "NOISE_KEYS", "NOISE_KEY_VERSION", "STREAMS", "NoiseKey",
           "bit_reproducible", "check_noise_key", "default_noise_key", "hash_entries",
           "noise_key", "noise_key_label", "noise_key_record", "noise_sampler",
           "resolved_noise_key"]

#: ``privacy.noise_key`` values; unset (``None``) means :func:`default_noise_key`.
NOISE_KEYS = ("seed", "secret")

#: Version of the key derivation, part of the config hash of every DP-SGD run: 2 mixes the
#: config hash into the key (1, the run seed alone, is what records without ``noise_key`` ran).
NOISE_KEY_VERSION = 2

#: Tag of each noise stream in the key's SeedSequence (independent streams).
STREAMS: Mapping[str, int] = {"engine": 0x401CE, "shared": 0x5A4ED, "library": 0x11B7A}

#: What a report says of a record without ``privacy.noise_key`` (its noise keyed by the seed).
LEGACY_NOISE_KEY = "seed (run seed only, before config hashes were mixed in)"

#: Floating-point notes of each noise draw (:func:`noise_sampler`), by (noise kind, hardened).
_SAMPLERS: Mapping[tuple[str, bool], str] = {
    ("gaussian", False): (
        "one Gaussian draw per coordinate from the framework's seeded generator; exposed to "
        "the floating-point attacks on Gaussian samplers of Jin et al. 2022"),
    ("gaussian", True): (
        "sum of four Gaussian draws / 2 per coordinate (Holohan & Braghin 2021, the "
        "construction of Opacus's secure_mode): a floating-point mitigation, not a proof"),
    ("laplace", False): (
        "scale * (E1 - E2) from two exponential draws; exposed to Mironov 2012's "
        "floating-point attack on textbook Laplace samplers (no safe sampler here)"),
}
_SAMPLERS = {**_SAMPLERS, ("laplace", True): _SAMPLERS[("laplace", False)]}

#: The noise draw of each backend's library recipe (``recipe: library``) with a secret key:
#: what the library's public API lets the bench change.
LIBRARY_SECRET_SAMPLERS: Mapping[str, str] = {
    "tf": ("TF Privacy's own tf.random.normal under a secret global seed (its optimizer "
           "takes no generator nor sampler: exposed to Jin et al. 2022)"),
    "torch": ("Opacus's secure_mode sampler (four draws / 2) on a secretly keyed "
              "torch.Generator (secure_mode itself needs torchcsprng, which does not build "
              "with torch 2.x)"),
}


def default_noise_key(data: DataSpec) -> str:
    """``seed`` for a registered public data set read from the data root or a package
    (``mnist``, ``digits``, ``pneumoniamnist``...), ``secret`` for any data the user gives
    (a ``PREFIX:PATH`` name such as ``imagefolder:`` or ``medmnist:``, or ``data.path``)."""
    path_loaded = any(str(data.name).startswith(prefix) for prefix in PATH_PREFIXES)
    return "secret" if path_loaded or data.path is not None else "seed"


def draws_gradient_noise(config: RunConfig) -> bool:
    """True for a DP-SGD run (the only runs whose noise this key drives)."""
    return bool(config.privacy.is_dpsgd)


def resolved_noise_key(config: RunConfig) -> str | None:
    """The run's noise key: ``privacy.noise_key``, else :func:`default_noise_key`; None for a
    run that draws no gradient noise (non-private, local DP)."""
    if not draws_gradient_noise(config):
        return None
    return config.privacy.noise_key or default_noise_key(config.data)


def check_privacy_noise_key(privacy: PrivacySpec) -> None:
    """The privacy section's own checks of ``noise_key`` (one-line ConfigErrors)."""
    key = privacy.noise_key
    if key is not None and key not in NOISE_KEYS:
        raise ConfigError(f"privacy.noise_key={key!r} is not known; valid: "
                          f"{', '.join(NOISE_KEYS)} (or unset: the data set's default)")
    if key == "secret" and not privacy.is_dpsgd:
        raise ConfigError(
            f"privacy.noise_key='secret' keys DP-SGD noise; privacy.mechanism="
            f"{privacy.mechanism!r} draws none (local-DP noise is keyed by the run seed); "
            "valid: noise_key seed or unset")


def check_noise_key(config: RunConfig) -> None:
    """Refuse a ``secret`` key with ``privacy.noise_source: shared`` (the shared noise is
    drawn from a key both backends rebuild, so it cannot be secret)."""
    key = resolved_noise_key(config)
    if key == "secret" and config.privacy.noise_source == "shared":
        given = "" if config.privacy.noise_key else \
            f" (the default for data set {config.data.name!r}, not a registered public one)"
        raise ConfigError(
            f"privacy.noise_key='secret'{given} refuses privacy.noise_source='shared' "
            "(shared noise is rebuilt from the seed); valid: noise_source framework, or "
            "noise_key seed for public data")


def hash_entries(config: RunConfig) -> dict[str, Any]:
    """What the config hash adds to the privacy section for the noise key: the resolved key
    and :data:`NOISE_KEY_VERSION` for a DP-SGD run, nothing otherwise."""
    key = resolved_noise_key(config)
    if key is None:
        return {}
    return {"noise_key": key, "noise_key_version": NOISE_KEY_VERSION}


@dataclass(frozen=True)
class NoiseKey:
    """The key of one noise stream of one run.

    Attributes:
        mode: ``seed`` or ``secret``.
        value: the key, an integer below 2**bits (never printed: ``repr`` hides it).
        bits: its size.
        hardened: True when the Gaussian draw uses the four-draw construction (``secret``).
    """

    mode: str
    value: int
    bits: int
    hardened: bool

    def __repr__(self) -> str:
        return f"NoiseKey(mode={self.mode!r}, bits={self.bits}, hardened={self.hardened})"

    __str__ = __repr__


def noise_key(config: RunConfig, stream: str, bits: int = 64) -> NoiseKey:
    """The key of noise stream ``stream`` (:data:`STREAMS`) of ``config``, ``bits`` bits (a
    multiple of 64): derived from (seed, config hash, stream) for ``seed``, drawn from the
    operating system's entropy for ``secret`` (a fresh key at every call: call it once per
    generator).

    Raises:
        ConfigError: an unknown stream or bit count, or a run without gradient noise.
    """
    if stream not in STREAMS:
        raise ConfigError(f"noise stream {stream!r} is not known; valid: {', '.join(STREAMS)}")
    if bits < 64 or bits % 64:
        raise ConfigError(f"noise key bits={bits} is not valid; valid: a multiple of 64")
    mode = resolved_noise_key(config)
    if mode is None:
        raise ConfigError(f"privacy.mechanism={config.privacy.mechanism!r} draws no gradient "
                          "noise: it has no noise key")
    if mode == "secret":
        return NoiseKey(mode, secrets.randbits(bits), bits, hardened=True)
    words = np.random.SeedSequence(
        [int(config.seed), int(config.config_hash, 16), STREAMS[stream]]
    ).generate_state(bits // 64, np.uint64)
    value = sum(int(w) << (64 * i) for i, w in enumerate(words))
    return NoiseKey(mode, value, bits, hardened=False)


def noise_sampler(config: RunConfig, backend: str) -> str:
    """How a run's noise is drawn, with its floating-point exposure, as its record says."""
    from dpcore.mechanisms import get_mechanism

    mode = resolved_noise_key(config)
    if mode is None:
        return ""
    sampler = get_mechanism(config.privacy.mechanism).sampler
    kind = sampler.name if sampler is not None else ""
    if config.recipe == "library":
        if mode == "secret" and backend in LIBRARY_SECRET_SAMPLERS:
            return LIBRARY_SECRET_SAMPLERS[backend]
        return _SAMPLERS[("gaussian", False)]
    if config.privacy.noise_source == "shared":
        return (f"{kind} draws of numpy's Philox generator in dpcore (shared by both "
                "backends); exposed like any floating-point sampler")
    return _SAMPLERS.get((kind, mode == "secret"), f"{kind} noise")


def noise_key_label(mode: str | None) -> str:
    """A key as reports name it: ``seed (config hash + seed)``, ``secret (OS entropy, kept
    nowhere; not bit-reproducible)``; :data:`LEGACY_NOISE_KEY` for a record without one."""
    if mode is None:
        return LEGACY_NOISE_KEY
    if mode == "secret":
        return "secret (OS entropy, kept nowhere; not bit-reproducible)"
    return "seed (derived from the seed and the config hash)"


def noise_key_record(config: RunConfig, backend: str) -> dict[str, Any]:
    """The RunResult ``privacy`` keys of the noise key: ``noise_key`` (``seed`` / ``secret``),
    ``noise_key_version``, ``bit_reproducible`` and ``noise_sampler``; empty for a run
    without gradient noise. The key itself is never recorded."""
    mode = resolved_noise_key(config)
    if mode is None:
        return {}
    return {"noise_key": mode, "noise_key_version": NOISE_KEY_VERSION,
            "bit_reproducible": mode != "secret",
            "noise_sampler": noise_sampler(config, backend)}


def bit_reproducible(privacy: Mapping[str, Any]) -> bool:
    """Whether a stored run (its RunResult ``privacy`` entry) can be rerun bit for bit: False
    for a ``secret`` noise key (a rerun draws other noise: a difference is no failure)."""
    return privacy.get("bit_reproducible", True) is not False
