"""TensorFlow Privacy's own epsilon computation, kept as a cross-check of the shared ledger."""

from __future__ import annotations

import logging


def tf_privacy_epsilon(
    sampling_rate: float, noise_multiplier: float, steps: int, delta: float
) -> float:
    """Epsilon by TF Privacy's ``compute_dp_sgd_privacy`` (RDP, Poisson sampling).

    That function takes (n, batch_size, epochs) and derives q = batch_size / n and
    steps = ceil(epochs * n / batch_size). We pass batch_size = 1, n = 1 / q and
    epochs = (steps - 0.5) * q, so that it composes exactly ``steps`` steps at exactly our q.
    Its deprecation warning (it assumes Poisson sampling and no microbatch doubling, which is
    the bench's setting: clipping per example, Poisson batches) is silenced.
    """
    from absl import logging as absl_logging
    from tensorflow_privacy.privacy.analysis.compute_dp_sgd_privacy_lib import (
        compute_dp_sgd_privacy,
    )

    previous = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.ERROR)
    logging.getLogger("absl").setLevel(logging.ERROR)
    try:
        epsilon, _order = compute_dp_sgd_privacy(
            1.0 / sampling_rate, 1, noise_multiplier, (steps - 0.5) * sampling_rate, delta
        )
    finally:
        absl_logging.set_verbosity(previous)
    return float(epsilon)


def tf_privacy_user_epsilon(
    n: int, batch_size: int, noise_multiplier: float, epochs: float, delta: float
) -> float:
    """Epsilon by TF Privacy's ``compute_dp_sgd_privacy(n, batch_size, noise_multiplier,
    epochs, delta)`` called as its users call it: their data set size, batch size and epochs.
    It then derives its own q = batch_size / n and steps = ceil(epochs * n / batch_size), which
    may differ from the steps the bench plans (``round(1/q)`` steps per epoch), so the figure
    may differ from :func:`tf_privacy_epsilon` (its RDP on exactly our steps)."""
    from absl import logging as absl_logging
    from tensorflow_privacy.privacy.analysis.compute_dp_sgd_privacy_lib import (
        compute_dp_sgd_privacy,
    )

    previous = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.ERROR)
    logging.getLogger("absl").setLevel(logging.ERROR)
    try:
        epsilon, _order = compute_dp_sgd_privacy(n, batch_size, noise_multiplier, epochs, delta)
    finally:
        absl_logging.set_verbosity(previous)
    return float(epsilon)


def accountant_epsilons(
    noise_multiplier: float, sampling_rate: float, steps: int, delta: float, *, n: int,
    batch_size: int, epochs: float,
) -> dict[str, float | None]:
    """TF Privacy's figures of one DP-SGD setting as ``dpcompare epsilon`` shows them:
    ``tf_privacy`` (:func:`tf_privacy_epsilon`, exactly ``steps`` steps at ``sampling_rate``)
    and ``tf_privacy_user`` (:func:`tf_privacy_user_epsilon`, called with ``n``,
    ``batch_size`` and ``epochs`` as its users call it)."""
    return {"tf_privacy": tf_privacy_epsilon(sampling_rate, noise_multiplier, steps, delta),
            "tf_privacy_user": tf_privacy_user_epsilon(n, batch_size, noise_multiplier, epochs,
                                                       delta)}
