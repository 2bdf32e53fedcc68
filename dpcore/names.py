"""Names a user types: backend aliases and "did you mean" suggestions for unknown names.

One place for the command line, config files and :mod:`compare.api`, so that a typo of a data
set, model, preset or backend name gets the same one-line answer everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from dpcore.architectures import CUSTOM_MODEL, model_names
from dpcore.datasets import DATASETS, PATH_PREFIXES
from dpcore.errors import ConfigError
from dpcore.suggest import did_you_mean

#: Other names of the backends, as users of each library call them -> the backend's name.
BACKEND_ALIASES: Mapping[str, str] = MappingProxyType({
    "opacus": "torch", "pytorch": "torch", "tensorflow": "tf", "tf-privacy": "tf",
    "tf_privacy": "tf", "tensorflow-privacy": "tf", "keras": "tf",
})


def resolve_backend(name: object, valid: Iterable[str] = ("tf", "torch"), *,
                    key: str = "backend") -> str:
    """The backend ``name`` means: itself, or the backend an alias of
    :data:`BACKEND_ALIASES` names (case-insensitive).

    Raises:
        ConfigError: an unknown name, with the valid ones, the aliases and a suggestion.
    """
    choices = tuple(valid)
    text = str(name).strip()
    if text in choices:
        return text
    alias = BACKEND_ALIASES.get(text.lower())
    if alias is not None and alias in choices:
        return alias
    if text.lower() in choices:
        return text.lower()
    raise ConfigError(
        f"{key} {name!r} is not known{did_you_mean(text, [*choices, *BACKEND_ALIASES])}; "
        f"valid: {', '.join(choices)} (or {', '.join(sorted(BACKEND_ALIASES))})")


def check_names(config: object) -> None:
    """Refuse an unknown data set or model name of a RunConfig before anything is loaded or
    printed, with the valid names and the closest one (``mnsit`` -> ``mnist``, ``MNIST5k`` ->
    ``mnist5k``, ``cnn5`` -> ``cnn4``).

    Raises:
        ConfigError: naming the key, the bad value, a suggestion and the valid names.
    """
    models = (*model_names(), CUSTOM_MODEL)
    data_name = str(config.data.name)  # type: ignore[attr-defined]
    if data_name not in DATASETS and not data_name.startswith(tuple(PATH_PREFIXES)):
        raise ConfigError(
            f"data.name={data_name!r} is not known{did_you_mean(data_name, DATASETS)}; "
            f"valid: {', '.join(DATASETS)}, or "
            f"{', or '.join(prefix + 'PATH' for prefix in PATH_PREFIXES)}")
    model_name = str(config.model.name)  # type: ignore[attr-defined]
    if model_name not in models:
        raise ConfigError(
            f"model.name={model_name!r} is not known{did_you_mean(model_name, models)}; "
            f"valid: {', '.join(models)}")
