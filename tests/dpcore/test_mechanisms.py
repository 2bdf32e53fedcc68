"""The DP-SGD mechanism registry (dpcore/mechanisms.py) states what the code asks of each
mechanism by name, the calibration accountants answer which mechanisms they support, and the
config's allowed values follow the registries."""

from __future__ import annotations

import math

import pytest
from dp_accounting import dp_event as dpe

from dpcore import config as config_module
from dpcore.accounting import calibration_accountant, dpsgd_event, noise_floor
from dpcore.config import PrivacySpec, RunConfig, normalise_mechanism
from dpcore.errors import ConfigError
from dpcore.ldp.mechanisms import LDP_MECHANISMS
from dpcore.mechanisms import (
    DEFAULT_DPSGD,
    DP_MECHANISMS,
    NOISE_SAMPLERS,
    aliases,
    cli_names,
    dpsgd_names,
    get_mechanism,
    is_non_private,
    noises_gradients,
    privatises_images,
)
from dpcore.trainloop import step_mechanism


def test_the_four_mechanisms_and_what_each_declares() -> None:
    assert tuple(DP_MECHANISMS) == ("none", "dpsgd-gaussian", "dpsgd-laplace", "ldp")
    assert dpsgd_names() == ("dpsgd-gaussian", "dpsgd-laplace")
    gaussian, laplace = get_mechanism("dpsgd-gaussian"), get_mechanism("dpsgd-laplace")
    assert (gaussian.clip_norm, gaussian.sampler) == ("l2", NOISE_SAMPLERS["gaussian"])
    assert (laplace.clip_norm, laplace.sampler) == ("l1", NOISE_SAMPLERS["laplace"])
    assert gaussian.library_recipe and gaussian.library_accountant and gaussian.microbatches
    assert not (laplace.library_recipe or laplace.library_accountant or laplace.microbatches)
    assert get_mechanism("none").library_recipe and not get_mechanism("ldp").library_recipe
    assert (noise_floor("dpsgd-gaussian"), noise_floor("dpsgd-laplace")) == (1e-3, 0.05)
    assert noise_floor("none") is None and noise_floor("ldp") is None
    assert calibration_accountant("dpsgd-gaussian") == "rdp"
    assert calibration_accountant("dpsgd-laplace") == "pld"
    # asked, not listed: RDP has no subsampled-Laplace bound, Opacus's PRV is Gaussian only
    assert gaussian.accountants == ("rdp", "pld", "prv") and laplace.accountants == ("pld",)
    assert get_mechanism("none").accountants == get_mechanism("ldp").accountants == ()


def test_each_accountant_answers_what_it_supports() -> None:
    from dpcore.accountants import ACCOUNTANTS

    def run(step: dpe.DpEvent) -> dpe.DpEvent:
        return dpe.SelfComposedDpEvent(dpe.PoissonSampledDpEvent(0.01, step), 100)

    gaussian, laplace = run(dpe.GaussianDpEvent(1.0)), run(dpe.LaplaceDpEvent(1.0))
    assert {name: (a.supports(gaussian), a.supports(laplace))
            for name, a in ACCOUNTANTS.items()} == {
        "rdp": (True, False), "pld": (True, True), "prv": (True, False)}
    assert ACCOUNTANTS["prv"].provider == "torch" and ACCOUNTANTS["rdp"].provider is None


def test_the_lookups_are_false_for_unknown_names_and_missing_values() -> None:
    for value in ("dpsgd", "gaussian", None, math.nan, 3):
        assert not (noises_gradients(value) or is_non_private(value)
                    or privatises_images(value))
    assert noises_gradients("dpsgd-laplace") and noises_gradients("dpsgd-gaussian")
    assert is_non_private("none") and privatises_images("ldp")
    with pytest.raises(ConfigError, match=r"^privacy.mechanism='dp' is not known to the "
                                          r"privacy mechanisms \(did you mean 'ldp'\?\); "
                                          r"valid: none, dpsgd-gaussian, dpsgd-laplace, ldp$"):
        get_mechanism("dp")


def test_events_come_from_the_registry() -> None:
    event = dpsgd_event("dpsgd-laplace", 2.0, 0.1, 5)
    assert event == dpe.SelfComposedDpEvent(
        dpe.PoissonSampledDpEvent(0.1, dpe.LaplaceDpEvent(2.0)), 5)
    assert dpsgd_event("dpsgd-gaussian", 1.0, 1.0, 3) == dpe.SelfComposedDpEvent(
        dpe.GaussianDpEvent(1.0), 3)
    assert dpsgd_event("none", 0.0, 0.1, 3) == dpe.NonPrivateDpEvent()  # noise 0: not private
    with pytest.raises(ConfigError, match="'ldp' has no DP-SGD event; valid: dpsgd-gaussian, "
                                          "dpsgd-laplace"):
        dpsgd_event("ldp", 1.0, 0.1, 3)
    assert get_mechanism("none").training_event() == dpe.NonPrivateDpEvent()
    assert get_mechanism("ldp").training_event() == dpe.NoOpDpEvent()


def test_names_of_the_cli_and_of_files() -> None:
    assert cli_names() == {"none": "none", "gaussian": "dpsgd-gaussian",
                           "laplace": "dpsgd-laplace", "ldp": "ldp"}
    assert aliases() == {"gaussian": "dpsgd-gaussian", "laplace": "dpsgd-laplace",
                         "dp-sgd": "dpsgd-gaussian", "dpsgd": "dpsgd-gaussian",
                         "non-private": "none", "nonprivate": "none"}
    assert normalise_mechanism(" Laplace ") == "dpsgd-laplace"
    assert normalise_mechanism("unknown") == "unknown"
    assert DEFAULT_DPSGD == "dpsgd-gaussian"


@pytest.mark.parametrize(("mechanism", "clip", "noise"), [
    ("dpsgd-gaussian", "l2", "gaussian"), ("dpsgd-laplace", "l1", "laplace"),
    ("none", None, None)])
def test_the_step_takes_the_mechanism_sampler(mechanism: str, clip: str | None,
                                              noise: str | None) -> None:
    from dpcore.accounting import plan_privacy

    noise_multiplier = None if mechanism == "none" else 1.5
    config = RunConfig(privacy=PrivacySpec(mechanism=mechanism,
                                           noise_multiplier=noise_multiplier,
                                           max_grad_norm=2.0))
    step = step_mechanism(config, plan_privacy(config, 1000))
    assert (step.clip_kind, step.noise_kind) == (clip, noise)
    assert step.noise_scale == (0.0 if noise is None else 3.0)


def test_config_choices_are_the_registries() -> None:
    assert tuple(DP_MECHANISMS) == config_module.PRIVACY_MECHANISMS
    assert tuple(LDP_MECHANISMS) == config_module.LDP_MECHANISM_NAMES
    assert config_module.CALIBRATION_ACCOUNTANTS == ("rdp", "pld", "prv")
    from dpcore.audit.faults import FAULTS

    assert tuple(FAULTS) == config_module.FAULTS
    with pytest.raises(AttributeError):
        config_module.NOT_A_NAME  # noqa: B018
