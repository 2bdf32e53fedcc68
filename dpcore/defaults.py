"""The hyper-parameters ``dpcompare train`` and ``compare.api.train`` use when the user gives none.

The config dataclasses (:mod:`dpcore.config`) keep their own defaults (ReLU, SGD lr 0.1,
batch 256, no momentum, 1 epoch): every stored run and every preset was hashed with them, and a
preset sets its own hyper-parameters. These defaults are applied one level up, where the CLI
and the API turn a user's *partial* settings (options, a config file, a mapping) into a
:class:`~dpcore.config.RunConfig`: a key the user did not give is taken from
:data:`TRAIN_DEFAULTS`; a key the user gave, even to the dataclass default, is kept.

Values: chosen by ``python -m benchmarks.defaults_sweep`` (cnn4, Gaussian DP-SGD at epsilon 8,
delta 1e-5, clip norm 1) on a validation split carved from the training split of ``digits``
and ``mnist5k``, never on a test set; the table and the command are in
``reports/defaults-sweep/README.md`` and the choice in ``docs/defaults-sweep.md``. The chosen
point (tanh, SGD lr 0.1 with momentum 0.9, expected batch 64, 5 epochs) has the best mean
validation accuracy over both data sets (0.887; tanh lr 1.0 without momentum for 10 epochs:
0.885; ReLU at best 0.838); its 5 epochs also keep a first run to about a minute on them.

Scope:

* the learning rate and momentum are tuned for SGD on clipped, noised mean gradients; they are
  applied only when the optimizer is SGD (a config that picks ``adam`` gets the dataclass
  learning rate, 0.1, unless it gives one);
* ``train.epochs`` is applied only when neither ``train.epochs`` nor ``train.steps`` is given;
* ``model.tempered_*`` keys are applied only with the default activation;
* :data:`DATA_DEFAULTS` are applied only to the data set they name (``digits``: 16x16);
* :data:`RECIPE_DEFAULTS` only under ``recipe: library`` and only when the backend is known:
  each library's own sampling (TF Privacy: shuffled fixed batches; Opacus: Poisson).

The presets give every one of these keys they rely on (their hashes predate these defaults),
so filling defaults never changes a preset's runs (``tests/compare/test_defaults_callers.py``).
Every run's record stores the keys filled here (``RunResult.defaults``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

#: Dotted config key -> the value used when the user does not give that key. Units: ``lr`` is
#: the SGD step size applied to the noised mean of per-example gradients clipped to L2 norm
#: ``privacy.max_grad_norm`` (1.0); ``batch_size`` is the expected logical batch (examples);
#: ``epochs`` is expected passes over the training set.
TRAIN_DEFAULTS: Mapping[str, Any] = MappingProxyType({
    "model.activation": "tanh",
    "train.lr": 0.1,
    "train.momentum": 0.9,
    "train.batch_size": 64,
    "train.epochs": 5.0,
})
#: Data set -> dotted config key -> the value used when the user does not give that key.
#: scikit-learn's digits are 8x8, smaller than the convolutional models take (cnn4 needs at
#: least 13x13): they are upscaled to 16x16, the size the defaults sweep trained them at.
DATA_DEFAULTS: Mapping[str, Mapping[str, Any]] = MappingProxyType({
    "digits": MappingProxyType({"data.image_size": 16}),
})
#: Keys applied only when the optimizer ends up ``sgd``.
SGD_ONLY = frozenset({"train.lr", "train.momentum"})
#: Keys applied only when the activation ends up the default one.
ACTIVATION_ONLY = frozenset(k for k in TRAIN_DEFAULTS if k.startswith("model.tempered_"))


def _get(raw: Mapping[str, Any], dotted: str) -> Any:
    """The value at ``dotted`` in a nested mapping, or None when absent (or null)."""
    node: Any = raw
    for key in dotted.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def _given(raw: Mapping[str, Any], dotted: str) -> bool:
    """True if the nested mapping holds ``dotted`` (null counts as given)."""
    section, _, key = dotted.rpartition(".")
    node = _get(raw, section) if section else raw
    return isinstance(node, Mapping) and key in node


#: ``recipe: library`` -> backend -> dotted key -> the value used when the user does not give
#: that key: each library's own tutorial setting (TF Privacy's ``model.fit`` runs shuffled
#: fixed-size batches, Opacus's ``make_private`` Poisson batches). Applied only when the
#: backend is known (``train``; a grid resolves each backend separately).
RECIPE_DEFAULTS: Mapping[str, Mapping[str, Mapping[str, Any]]] = MappingProxyType({
    "library": MappingProxyType({
        "tf": MappingProxyType({"privacy.sampling": "shuffle"}),
        "torch": MappingProxyType({"privacy.sampling": "poisson"}),
    }),
})


def apply_train_defaults(raw: Mapping[str, Any], backend: str | None = None) -> dict[str, Any]:
    """A deep copy of the partial config mapping ``raw`` with :data:`TRAIN_DEFAULTS` filled in
    where the user gave nothing (see the module docstring for the scoping rules); the
    completed mapping of :func:`fill_defaults`."""
    return fill_defaults(raw, backend)[0]


def fill_defaults(raw: Mapping[str, Any], backend: str | None = None
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The one place where a user's partial settings get the bench's defaults: ``dpcompare
    train``, grid files and presets (each cell), and ``compare.api`` all call it.

    Args:
        raw: a partial RunConfig mapping (sections ``data``, ``model``, ``privacy``,
            ``train``...), as read from a config file and the user's options. Not modified.
        backend: ``tf`` or ``torch`` when known: then :data:`RECIPE_DEFAULTS` apply too.

    Returns:
        ``(completed, filled)``: the completed mapping, to pass to :meth:`RunConfig.from_dict`
        (which validates it), and ``{dotted key: value}`` of every key filled from the
        defaults (what a run's record stores as ``defaults``; empty when the user gave all).
    """
    out: dict[str, Any] = json.loads(json.dumps(dict(raw)))
    length_given = _given(out, "train.epochs") or _given(out, "train.steps")
    skip: set[str] = {"train.epochs"} if length_given else set()
    optimizer = _get(out, "train.optimizer") or "sgd"
    if optimizer != "sgd":
        skip |= SGD_ONLY
    activation = _get(out, "model.activation")
    if activation is not None and activation != TRAIN_DEFAULTS["model.activation"]:
        skip |= ACTIVATION_ONLY
    data_defaults = DATA_DEFAULTS.get(str(_get(out, "data.name")), {})
    recipe_defaults: Mapping[str, Any] = {}
    if backend is not None:
        recipe_defaults = RECIPE_DEFAULTS.get(str(_get(out, "recipe")), {}).get(backend, {})
    filled: dict[str, Any] = {}
    for dotted, value in [*TRAIN_DEFAULTS.items(), *data_defaults.items(),
                          *recipe_defaults.items()]:
        if dotted in skip or _given(out, dotted):
            continue
        section, _, key = dotted.rpartition(".")
        node = out.setdefault(section, {})
        if node is None:  # ``section: null`` in a file means an empty section
            node = out[section] = {}
        if isinstance(node, dict):  # anything else: from_dict names the bad section
            node[key] = value
            filled[dotted] = value
    return out, filled


def describe_settings(config: Any, filled: Mapping[str, Any]) -> str:
    """The hyper-parameters in force of a :class:`~dpcore.config.RunConfig`, one phrase, the
    values filled from the defaults marked, e.g. ``"tanh, sgd lr 0.1 (default), momentum 0.9
    (default), batch 64 (default), 5 epochs (default), clip 1"``."""
    def mark(dotted: str, text: str) -> str:
        return f"{text} (default)" if dotted in filled else text

    train, model, privacy = config.train, config.model, config.privacy
    parts = [mark("model.activation", model.activation),
             mark("train.lr", f"{train.optimizer} lr {train.lr:g}")]
    if train.optimizer == "sgd":
        parts.append(mark("train.momentum", f"momentum {train.momentum:g}"))
    parts.append(mark("train.batch_size", f"batch {train.batch_size}"))
    if train.steps is not None:
        parts.append(f"{train.steps} steps")
    else:
        parts.append(mark("train.epochs", f"{train.epochs:g} epochs"))
    if train.ema_decay is not None:
        parts.append(f"weight EMA {train.ema_decay:g}")
    if train.class_weights != "none":
        parts.append(f"{train.class_weights} class weights")
    if privacy.is_dpsgd:
        parts.append(f"clip {privacy.max_grad_norm:g}")
        parts.append(mark("privacy.sampling", f"{privacy.sampling} sampling"))
    if config.data.image_size is not None:
        parts.append(mark("data.image_size", f"{config.data.image_size}px"))
    return ", ".join(parts)
