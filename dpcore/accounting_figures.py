"""What a DP-SGD setting costs, as ``dpcompare epsilon`` states it (:func:`accounting_figures`).

One setting (N, B, q, noise or a target epsilon, epochs or steps, delta, mechanism) is checked,
its steps planned by :func:`dpcore.sampling.plan_batches`, its noise calibrated when a target
epsilon is given, and its epsilon computed by the shared accountants (dp_accounting RDP and
PLD). The libraries' own figures (Opacus, TF Privacy) are cross-checks that need a framework:
the caller passes them in as a :class:`LibraryEpsilons` callable (``compare`` loads each
backend by name), so this module imports no framework.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from dpcore.accounting import (
    calibrate_noise_multiplier,
    calibration_accountant,
    check_noise_multiplier,
    dpsgd_event,
    epsilon_pld,
    epsilon_rdp,
)
from dpcore.config import calibration_accountants, check_delta_below_one_over_n, default_delta
from dpcore.errors import ConfigError
from dpcore.mechanisms import DP_MECHANISMS, cli_names, dpsgd_names, get_mechanism
from dpcore.sampling import plan_batches

#: How :func:`accounting_figures` names each parameter in its error messages (Python names;
#: the CLI passes its option names, e.g. ``--batch-size``).
PYTHON_NAMES: dict[str, str] = {name: name for name in (
    "n", "batch_size", "sampling_rate", "noise_multiplier", "target_epsilon", "epochs",
    "steps", "delta", "mechanism", "calibrate_with")}

#: The epsilon keys of :func:`accounting_figures`: the shared accountants', then the
#: libraries' own (None where not computed).
EPSILON_KEYS: tuple[str, ...] = ("rdp", "pld", "opacus_rdp", "opacus_prv", "tf_privacy",
                                 "tf_privacy_user")


class LibraryEpsilons(Protocol):
    """The libraries' own epsilons of one Gaussian DP-SGD setting, keyed as in
    :data:`EPSILON_KEYS` (``opacus_rdp``, ``opacus_prv``, ``tf_privacy``,
    ``tf_privacy_user``; None where a library cannot compute one)."""

    def __call__(self, noise_multiplier: float, sampling_rate: float, steps: int,
                 delta: float, *, n: int, batch_size: int, epochs: float
                 ) -> dict[str, float | None]: ...


def epsilon_mechanisms() -> dict[str, str]:
    """The noise distributions :func:`accounting_figures` accounts, by their CLI names: the
    registered DP-SGD mechanisms, CLI name -> config name (``gaussian`` -> ``dpsgd-gaussian``)."""
    return cli_names(dpsgd_names())


def calibrators() -> tuple[str, ...]:
    """Accountants that can turn a target epsilon into a noise multiplier: those the
    registered mechanisms list (:func:`dpcore.config.calibration_accountants`: dp_accounting's
    ``rdp`` and ``pld``, Opacus's ``prv``)."""
    return calibration_accountants()


def accountant_limit(accountant: str) -> str:
    """Which mechanisms the calibration accountant ``accountant`` knows, in words, from what
    the registered mechanisms declare (:attr:`DpSgdMechanism.accountants`)."""
    known = [m.cli_name for m in DP_MECHANISMS.values() if accountant in m.accountants]
    return f"the {accountant} accountant knows {' and '.join(known) or 'no mechanism'} only"


def accounting_figures(
    *, n: int, batch_size: int, noise_multiplier: float | None = None,
    target_epsilon: float | None = None, epochs: float | None = None,
    steps: int | None = None, sampling_rate: float | None = None, delta: float | None = None,
    mechanism: str = "gaussian", calibrate_with: str | None = None,
    library: LibraryEpsilons | None = None,
    load_calibrator: Callable[[str | None], None] = lambda _name: None,
    names: Mapping[str, str] = PYTHON_NAMES,
) -> dict[str, Any]:
    """Epsilon of a DP-SGD setting, or the noise multiplier that reaches a target epsilon
    (give exactly one of ``noise_multiplier`` and ``target_epsilon``).

    Args:
        n: training set size N (examples).
        batch_size: expected batch size B (examples per step), 1..N.
        noise_multiplier: noise std (Laplace: scale) divided by the clip norm, >= 0.
        target_epsilon: a finite epsilon > 0 at ``delta`` to calibrate the noise to.
        epochs: expected passes over the data (steps = ceil(epochs * round(1/q)), as
            :func:`dpcore.sampling.plan_batches` plans Poisson batches); exactly one of
            ``epochs`` and ``steps``.
        steps: number of noised steps.
        sampling_rate: q in (0, 1]; default B / N.
        delta: target delta in (0, 1); default the largest power of ten below 1/(10 N).
        mechanism: the CLI name of a registered DP-SGD mechanism (:func:`epsilon_mechanisms`).
        calibrate_with: the accountant that calibrates (:func:`calibrators`); default the
            mechanism's first.
        library: the libraries' own epsilons (a Gaussian setting with noise > 0 only); None
            leaves them None.
        load_calibrator: called with ``calibrate_with`` just before calibrating, to load the
            code that registers that accountant (e.g. the torch backend for ``prv``).
        names: how error messages spell each parameter (:data:`PYTHON_NAMES`' keys).

    Returns:
        ``epsilon`` (a dict over :data:`EPSILON_KEYS`), ``noise_multiplier``, ``calibrated``,
        ``calibration_accountant``, ``mechanism`` (the config name), ``steps``,
        ``sampling_rate``, ``delta``, ``n``, ``batch_size`` and ``notes`` (list of str).

    Raises:
        ConfigError: a value out of range (the message names it and the valid range).
    """

    def bad(key: str, value: Any, valid: str) -> ConfigError:
        return ConfigError(f"{names[key]}={value!r} is not valid; valid: {valid}")

    known = epsilon_mechanisms()
    if mechanism not in known:
        raise bad("mechanism", mechanism, ", ".join(sorted(known)))
    if (noise_multiplier is None) == (target_epsilon is None):
        raise ConfigError(f"give exactly one of {names['noise_multiplier']} and "
                          f"{names['target_epsilon']}")
    if (epochs is None) == (steps is None):
        raise ConfigError(f"give exactly one of {names['epochs']} and {names['steps']}")
    if n is None or isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise bad("n", n, "an integer >= 1")
    if not 1 <= batch_size <= n:
        raise bad("batch_size", batch_size, f"1..{n}")
    q = sampling_rate if sampling_rate is not None else batch_size / n
    notes = []
    if sampling_rate is not None and not math.isclose(sampling_rate, batch_size / n,
                                                      rel_tol=1e-3):
        notes.append(f"the sampling rate {sampling_rate:g} is used, not batch size / n = "
                     f"{batch_size}/{n} = {batch_size / n:.4g} (the batch size enters only "
                     "TF Privacy's compute_dp_sgd_privacy(n, batch, epochs) figure)")
    if not 0 < q <= 1 or math.isnan(q):
        raise bad("sampling_rate", q, "(0, 1]")
    delta = delta if delta is not None else default_delta(n)
    if not 0 < delta < 1:
        raise bad("delta", delta, "(0, 1)")
    check_delta_below_one_over_n(delta, n, key=names["delta"])
    if steps is not None and steps < 1:
        raise bad("steps", steps, "an integer >= 1")
    if epochs is not None and not 0 < epochs < math.inf:
        raise bad("epochs", epochs, "a finite number > 0")
    steps = plan_batches(n, batch_size, epochs=epochs, steps=steps,
                         sampling_rate=q).steps
    dp_mechanism = known[mechanism]
    accountants = get_mechanism(dp_mechanism).accountants
    if calibrate_with is not None and calibrate_with not in calibrators():
        raise bad("calibrate_with", calibrate_with, ", ".join(calibrators()))
    if calibrate_with is not None and target_epsilon is None:
        raise ConfigError(f"{names['calibrate_with']} applies to {names['target_epsilon']} "
                          f"only; valid: drop it, or give {names['target_epsilon']}")
    if calibrate_with is not None and calibrate_with not in accountants:
        raise bad("calibrate_with", calibrate_with,
                  f"{' or '.join(accountants)} ({accountant_limit(calibrate_with)})")
    if target_epsilon is not None:
        if not target_epsilon > 0 or math.isinf(target_epsilon):
            raise bad("target_epsilon", target_epsilon, "a finite > 0")
        load_calibrator(calibrate_with)
        noise = calibrate_noise_multiplier(dp_mechanism, target_epsilon, delta, q, steps,
                                           accountant=calibrate_with)
    else:
        assert noise_multiplier is not None
        if not 0 <= noise_multiplier < math.inf:  # inf: no accountant terminates
            raise bad("noise_multiplier", noise_multiplier, "a finite number >= 0")
        check_noise_multiplier(dp_mechanism, noise_multiplier, key=names["noise_multiplier"])
        noise = noise_multiplier
    event = dpsgd_event(dp_mechanism, noise, q, steps)
    epsilons: dict[str, float | None] = dict.fromkeys(EPSILON_KEYS)
    epsilons.update(rdp=epsilon_rdp(event, delta), pld=epsilon_pld(event, delta))
    if epsilons["pld"] is None and noise > 0:
        notes.append("PLD not computed: dp_accounting's grid fails numerically at this "
                     "setting (epsilon about 0, or in the millions); the RDP figure stands")
    if not get_mechanism(dp_mechanism).library_accountant:
        notes.append(f"Opacus and TF Privacy do not account {dp_mechanism}: no library "
                     "figures")
        if epsilons["rdp"] is None:
            notes.append("dp_accounting's RDP accountant has no subsampled-Laplace bound")
    elif noise == 0:
        notes.append("noise multiplier 0: not private")
    elif library is not None:
        user_epochs = epochs if epochs is not None else steps * batch_size / n
        epsilons.update(library(noise, q, steps, delta, n=n, batch_size=batch_size,
                                epochs=user_epochs))
        if epsilons["opacus_prv"] is None:
            notes.append("Opacus PRV not computed: at this noise its grid would need more "
                         "than a few hundred MB (epsilon is in the thousands or more)")
    calibrated = target_epsilon is not None
    return {
        "epsilon": epsilons,
        "noise_multiplier": noise,
        "calibrated": calibrated,
        "calibration_accountant": (calibrate_with or calibration_accountant(dp_mechanism))
                                  if calibrated else None,
        "mechanism": dp_mechanism,
        "steps": steps,
        "sampling_rate": q,
        "delta": delta,
        "n": n,
        "batch_size": batch_size,
        "notes": notes,
    }


__all__ = ["EPSILON_KEYS", "PYTHON_NAMES", "LibraryEpsilons", "accountant_limit",
           "accounting_figures", "calibrators", "epsilon_mechanisms"]
