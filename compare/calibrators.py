"""Make sure the code that registers a calibration accountant is loaded before calibrating.

:data:`dpcore.accounting.CALIBRATORS` holds dp_accounting's ``rdp`` and ``pld`` from the
start; a library's own accountant is registered by the backend that wraps the library (Opacus's
``prv`` by the torch backend's ``torchpipe.accounting``). A config may ask for ``prv`` on either
training backend, so the compare layer loads the providing backend here, through
:func:`dpcore.backend.load_backend` (the only mapping of backend names to code).
"""

from __future__ import annotations

from dpcore.accounting import CALIBRATOR_BACKENDS, CALIBRATORS
from dpcore.backend import load_backend
from dpcore.config import RunConfig


def load_calibrator(name: str | None) -> None:
    """Load the backend that registers the calibration accountant ``name`` (nothing for
    ``None``, a name already registered, or a name no backend provides: calibrating with it
    then fails in one line listing the registered ones)."""
    if name is None or name in CALIBRATORS:
        return
    provider = CALIBRATOR_BACKENDS.get(name)
    if provider is not None:
        load_backend(provider)


def load_config_calibrator(config: RunConfig) -> None:
    """:func:`load_calibrator` of ``config.factors.calibration_accountant`` when the config
    calibrates (``privacy.target_epsilon`` given)."""
    if config.privacy.target_epsilon is not None:
        load_calibrator(config.factors.calibration_accountant)
