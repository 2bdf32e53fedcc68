"""Checks of a run's audit that need its data set, made before anything trains or is written."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpcore.errors import ConfigError

if TYPE_CHECKING:
    from dpcore.config import RunConfig
    from dpcore.data.dataset import Dataset


def check_audit_inputs(config: RunConfig, dataset: Dataset) -> None:
    """Refuse canaries the data set or model cannot hold (one-line ConfigError).

    Raises:
        ConfigError: gradient canaries outnumbering the model's weight coordinates; input
            canaries on a text data set or outnumbering the training examples.
    """
    spec = config.audit_canaries
    if not spec.active:
        return
    if spec.kind == "input":
        from dpcore.audit.canaries import InputCanaries

        InputCanaries.for_dataset(spec, config.seed, dataset)  # raises on bad input
        return
    from dpcore.weights import weight_shapes

    shapes = weight_shapes(config.model, dataset.input_shape, dataset.n_classes,
                           dataset.vocabulary_size)
    total = sum(int(_size(s)) for s in shapes.values())
    if spec.count > total:
        raise ConfigError(
            f"audit_canaries.count={spec.count} is more than the {total} weight coordinates "
            f"of model {config.model.name!r}; valid for gradient canaries: 1..{total}")


def _size(shape: tuple[int, ...]) -> int:
    out = 1
    for d in shape:
        out *= int(d)
    return out
