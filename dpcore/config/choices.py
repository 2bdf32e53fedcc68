"""The values each config field may take.

Where a registry owns the names they are read from it when asked, never repeated: privacy
mechanisms from :data:`dpcore.mechanisms.DP_MECHANISMS`, calibration accountants from
:data:`dpcore.accountants.ACCOUNTANTS`, local-DP mechanisms from
:data:`dpcore.ldp.mechanisms.LDP_MECHANISMS`, audit faults from
:data:`dpcore.audit.faults.FAULTS`, loss class weightings from
:data:`dpcore.class_weights.CLASS_WEIGHTINGS`. Each registry lives in a leaf module its
implementations register into, so the configs import no layer above them. The rest are the
config's own vocabulary.
"""

from __future__ import annotations

from dpcore.accountants import ACCOUNTANTS
from dpcore.audit.faults import FAULTS as _FAULT_STEPS
from dpcore.class_weights import CLASS_WEIGHTINGS
from dpcore.ldp.mechanisms import LDP_MECHANISMS
from dpcore.mechanisms import mechanism_names

CONFIG_VERSION = 1

SAMPLING_MODES = ("poisson", "shuffle")
OPTIMIZERS = ("sgd", "adam")
ACTIVATIONS = ("relu", "tanh", "tempered_sigmoid")
#: Which test images a local-DP run's headline test metrics use (``data.ldp_test_inputs``);
#: the run records its metrics on both. The first is the default (a record without the option
#: was evaluated on privatised images; the default is left out of the hash).
LDP_TEST_INPUTS = ("privatised", "clean")
#: ``perf.engine``: the step engines every backend provides (:data:`dpcore.backend.ENGINE_NAMES`
#: is this tuple).
ENGINES = ("reference", "fast")
#: ``perf.memory_format`` values: the framework's default layout or channels-last (torch).
MEMORY_FORMATS = ("default", "channels_last")
#: ``perf.route_choice`` values: Book-Keeping's rule, or each layer's routes timed at warm-up.
ROUTE_CHOICES = ("rule", "measure")
RECIPES = ("harmonised", "library")
NORMALISATIONS = ("expected", "actual", "microbatches")
INITIALISATIONS = ("neutral", "torch")
INPUT_SCALINGS = ("unit", "standardised")
EVAL_SPLITS = ("test", "train")
#: ``audit_canaries.kind``: white-box gradient canaries or black-box mislabelled images.
CANARY_KINDS = ("gradient", "input")
#: Where a DP-SGD step's noise comes from: each library's own generator, or one vector per
#: step drawn in dpcore and added by both backends (:mod:`dpcore.shared_noise`).
NOISE_SOURCES = ("framework", "shared")


def privacy_mechanisms() -> tuple[str, ...]:
    """``privacy.mechanism``: every registered mechanism (a test may register one more)."""
    return mechanism_names()


def calibration_accountants() -> tuple[str, ...]:
    """``factors.calibration_accountant``: every declared accountant, in their order
    (``rdp``, ``pld``, ``prv``)."""
    return tuple(ACCOUNTANTS)


def fault_names() -> tuple[str, ...]:
    """``factors.fault``: deliberately broken DP steps, for audit checks only (the names of
    :data:`dpcore.audit.faults.FAULTS`)."""
    return tuple(_FAULT_STEPS)


def ldp_mechanism_names() -> tuple[str, ...]:
    """``data.ldp_mechanism``: the names of :data:`dpcore.ldp.mechanisms.LDP_MECHANISMS`."""
    return tuple(LDP_MECHANISMS)


def class_weighting_names() -> tuple[str, ...]:
    """``train.class_weights``: the names of :data:`dpcore.class_weights.CLASS_WEIGHTINGS`
    (``none`` first)."""
    return tuple(CLASS_WEIGHTINGS)
