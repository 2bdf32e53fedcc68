"""The privacy mechanisms of a run (``privacy.mechanism``): one registered class each.

Every place that treats mechanisms differently asks this registry instead of comparing the
name: whether the step clips and noises gradients, with which norm (L2 / L1) and which noise
sampler (the backends keep their framework code and pick it by :attr:`DpSgdMechanism.sampler`),
the :class:`~dp_accounting.DpEvent` of one step (the calibration accountants that support it
answer for themselves: :mod:`dpcore.accountants`), the smallest noise the accountants
evaluate, and whether the library recipes and the libraries' own accountants know it. How a
report draws a mechanism is the report layer's business (``compare.reporting.styles``).

Registered here: ``none`` (non-private), ``dpsgd-gaussian``, ``dpsgd-laplace`` and ``ldp``
(no gradient noise: the images were privatised by a
:data:`dpcore.ldp.mechanisms.LDP_MECHANISMS` entry before training). A new DP-SGD mechanism
is one subclass of :class:`DpSgdMechanism` decorated with ``@DP_MECHANISMS.register()``
(``docs/ARCHITECTURE.md``, "a DP-SGD mechanism"). This module is a leaf: it imports neither
the configs nor a framework.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from dp_accounting import dp_event as dpe

from dpcore.accountants import ACCOUNTANTS
from dpcore.errors import ConfigError
from dpcore.registry import Registry


@dataclass(frozen=True)
class NoiseSampler:
    """What a backend's DP step draws: the clipping norm of each example's flat gradient and
    the noise added once per logical batch to the clipped sum.

    Attributes:
        name: the key a backend looks its implementation up by (``StepMechanism.noise_kind``).
        clip_norm: ``l2`` or ``l1``: the per-example norm bounded by the clip norm C (the
            sensitivity of the sum in that norm is C).
        description: the per-coordinate noise in words (scale = noise_multiplier * C).
    """

    name: str
    clip_norm: str
    description: str


#: Noise samplers the backends implement: name -> sampler, in registration order. A mechanism
#: reusing one of them needs no backend code; a new sampler needs one implementation per
#: backend, registered under its name (``tfpipe.dp.QUERIES``, ``torchpipe.dp.OPTIMIZERS``).
NOISE_SAMPLERS: Registry[str, NoiseSampler] = Registry(
    "noise samplers", key="noise sampler", key_of=lambda sampler: sampler.name)
NOISE_SAMPLERS.register()(NoiseSampler("gaussian", "l2", "N(0, (sigma C)^2) per coordinate"))
NOISE_SAMPLERS.register()(NoiseSampler("laplace", "l1", "Laplace(0, sigma C) per coordinate"))


class DpSgdMechanism:
    """One value of ``privacy.mechanism`` and everything the bench does differently for it.

    Subclasses set the class attributes; the defaults describe a DP-SGD mechanism the
    libraries do not know (harmonised recipe only, no library accountant).

    Attributes:
        name: the config's name (stored in configs, so in their hashes: never rename one);
            its key in :data:`DP_MECHANISMS`.
        cli_name: the name of ``dpcompare train --mechanism`` / ``dpcompare epsilon``.
        aliases: further names a config file or the CLI may use for it.
        sampler: the noise sampler of its step, or None when gradients are neither clipped
            nor noised (``none``, ``ldp``).
        privatises_images: True when the training images were privatised locally (``ldp``).
        noise_floor: smallest non-zero noise multiplier the accountants evaluate.
        library_recipe: True when ``recipe: library`` runs it (TF Privacy's and Opacus's
            public APIs: Gaussian DP-SGD and the non-private step only).
        library_accountant: True when the libraries' own accountants cross-check its epsilon.
        microbatches: True when its step may clip microbatches (``factors.microbatch_size``).
    """

    name: ClassVar[str]
    cli_name: ClassVar[str]
    aliases: ClassVar[tuple[str, ...]] = ()
    sampler: ClassVar[NoiseSampler | None] = None
    privatises_images: ClassVar[bool] = False
    noise_floor: ClassVar[float] = 0.0
    library_recipe: ClassVar[bool] = False
    library_accountant: ClassVar[bool] = False
    microbatches: ClassVar[bool] = False

    @property
    def noises_gradients(self) -> bool:
        """True for DP-SGD: each example's gradient is clipped and the sum noised."""
        return self.sampler is not None

    @property
    def clip_norm(self) -> str | None:
        """``l2`` / ``l1`` (the clipped per-example norm), None without clipping."""
        return None if self.sampler is None else self.sampler.clip_norm

    @property
    def non_private(self) -> bool:
        """True for the non-private reference: no gradient noise and no private images."""
        return not self.noises_gradients and not self.privatises_images

    @property
    def accountants(self) -> tuple[str, ...]:
        """The calibration accountants (:data:`dpcore.accountants.ACCOUNTANTS`, in their
        order) that support a run of this mechanism: its step Poisson-subsampled and composed
        (empty without gradient noise)."""
        if not self.noises_gradients:
            return ()
        run = dpe.SelfComposedDpEvent(dpe.PoissonSampledDpEvent(0.5, self.step_event(1.0)), 2)
        return tuple(name for name, accountant in ACCOUNTANTS.items()
                     if accountant.supports(run))

    @property
    def calibration_accountant(self) -> str:
        """The accountant calibration and the spent epsilon use by default (the first of
        :attr:`accountants`: RDP for Gaussian noise, PLD for Laplace noise)."""
        if not self.accountants:
            raise ConfigError(f"mechanism={self.name!r} cannot be calibrated; valid: "
                              f"{', '.join(dpsgd_names())}")
        return self.accountants[0]

    def step_event(self, noise_multiplier: float) -> dpe.DpEvent:
        """The DpEvent of one non-subsampled step at ``noise_multiplier`` (> 0): noise std or
        scale over the clip norm, the sum's sensitivity in the clipped norm being 1."""
        raise ConfigError(f"mechanism={self.name!r} has no DP-SGD event; valid: "
                          f"{', '.join(dpsgd_names())}")

    def training_event(self) -> dpe.DpEvent:
        """The DpEvent of a run of a mechanism that adds no gradient noise."""
        raise ConfigError(f"mechanism={self.name!r} noises gradients: its event depends on "
                          "the noise, the sampling rate and the steps (dpsgd_event)")

    def __repr__(self) -> str:
        return f"<DpSgdMechanism {self.name}>"


def _one_mechanism(cls: type[DpSgdMechanism]) -> DpSgdMechanism:
    """The one instance :data:`DP_MECHANISMS` stores for ``cls``.

    Raises:
        ConfigError: its name (or its CLI name / an alias) is taken by another mechanism, or
            its sampler is not one of :data:`NOISE_SAMPLERS`.
    """
    taken = {n: m.name for m in DP_MECHANISMS.values() if m.name != cls.name
             for n in (m.name, m.cli_name, *m.aliases)}
    clash = [n for n in (cls.name, cls.cli_name, *cls.aliases) if n in taken]
    if clash:
        raise ConfigError(f"mechanism name {clash[0]!r} is taken by {taken[clash[0]]!r}; "
                          "valid: a name no registered mechanism uses")
    if cls.sampler is not None and NOISE_SAMPLERS.get(cls.sampler.name) != cls.sampler:
        raise ConfigError(f"mechanism {cls.name!r}: sampler {cls.sampler.name!r} is not "
                          f"registered; valid: {', '.join(NOISE_SAMPLERS)}")
    return cls()


#: ``privacy.mechanism`` name -> its mechanism (one instance), in registration order.
#: ``@DP_MECHANISMS.register()`` on a :class:`DpSgdMechanism` subclass files it under its
#: ``name``.
DP_MECHANISMS: Registry[str, DpSgdMechanism] = Registry(
    "privacy mechanisms", key="privacy.mechanism", key_of=lambda cls: cls.name,
    make=_one_mechanism)


@DP_MECHANISMS.register()
class NonPrivate(DpSgdMechanism):
    """The non-private reference step: no clipping, no noise (epsilon infinite)."""

    name = "none"
    cli_name = "none"
    aliases = ("non-private", "nonprivate")
    library_recipe = True

    def training_event(self) -> dpe.DpEvent:
        return dpe.NonPrivateDpEvent()


@DP_MECHANISMS.register()
class GaussianDpSgd(DpSgdMechanism):
    """DP-SGD with per-example L2 clipping and Gaussian noise (Abadi et al. 2016)."""

    name = "dpsgd-gaussian"
    cli_name = "gaussian"
    aliases = ("dp-sgd", "dpsgd")
    sampler = NOISE_SAMPLERS["gaussian"]
    #: A Gaussian noise of 0.001 clip norms gives epsilon in the millions.
    noise_floor = 1e-3
    library_recipe = True
    library_accountant = True
    microbatches = True

    def step_event(self, noise_multiplier: float) -> dpe.DpEvent:
        return dpe.GaussianDpEvent(noise_multiplier)


@DP_MECHANISMS.register()
class LaplaceDpSgd(DpSgdMechanism):
    """DP-SGD with per-example L1 clipping and Laplace noise. Neither library implements it;
    dp_accounting's RDP accountant has no subsampled-Laplace bound (PLD accounts it)."""

    name = "dpsgd-laplace"
    cli_name = "laplace"
    sampler = NOISE_SAMPLERS["laplace"]
    #: Laplace PLDs overflow below ~0.05 (a per-step epsilon of 20 is past any target).
    noise_floor = 0.05

    def step_event(self, noise_multiplier: float) -> dpe.DpEvent:
        return dpe.LaplaceDpEvent(noise_multiplier)


@DP_MECHANISMS.register()
class LocalDp(DpSgdMechanism):
    """No gradient noise: the images were privatised locally before training (the LDP layer
    states their epsilon); training itself is post-processing of the privatised images."""

    name = "ldp"
    cli_name = "ldp"
    privatises_images = True

    def training_event(self) -> dpe.DpEvent:
        return dpe.NoOpDpEvent()


def mechanism_names() -> tuple[str, ...]:
    """Every registered ``privacy.mechanism`` value."""
    return tuple(DP_MECHANISMS)


def dpsgd_names() -> tuple[str, ...]:
    """The registered mechanisms that clip and noise gradients."""
    return tuple(n for n, m in DP_MECHANISMS.items() if m.noises_gradients)


def get_mechanism(name: str) -> DpSgdMechanism:
    """The registered mechanism ``name``.

    Raises:
        ConfigError: ``name`` is not registered (:meth:`dpcore.registry.Registry.missing`).
    """
    return DP_MECHANISMS[name]


def find_mechanism(name: Any) -> DpSgdMechanism | None:
    """The registered mechanism ``name``, or None (an unknown name, None or NaN from a
    stored record)."""
    return DP_MECHANISMS.get(name) if isinstance(name, str) else None


def _declares(name: Any, attribute: str) -> bool:
    """True when ``name`` is registered and its mechanism's ``attribute`` is true."""
    mechanism = find_mechanism(name)
    return mechanism is not None and bool(getattr(mechanism, attribute))


def noises_gradients(name: Any) -> bool:
    """True when ``name`` is a registered DP-SGD mechanism (False for anything else)."""
    return _declares(name, "noises_gradients")


def is_non_private(name: Any) -> bool:
    """True when ``name`` is the registered non-private reference (``none``)."""
    return _declares(name, "non_private")


def privatises_images(name: Any) -> bool:
    """True when ``name`` trains on locally privatised images (``ldp``)."""
    return _declares(name, "privatises_images")


def aliases() -> dict[str, str]:
    """Names accepted on the command line and in files -> the config's name (each CLI name
    and alias; stored configs, and so their hashes, always hold the config's name)."""
    return {alias: m.name for m in DP_MECHANISMS.values()
            for alias in (m.cli_name, *m.aliases) if alias != m.name}


def cli_names(names: Iterable[str] | None = None) -> dict[str, str]:
    """CLI name -> config name, of ``names`` (default: every registered mechanism, in
    registration order)."""
    chosen = [get_mechanism(n) for n in (DP_MECHANISMS if names is None else names)]
    return {m.cli_name: m.name for m in chosen}


#: The DP-SGD mechanism of a run that asks for noise without naming one (``dpcompare train
#: --noise-multiplier`` / ``--epsilon`` alone).
DEFAULT_DPSGD = GaussianDpSgd.name
