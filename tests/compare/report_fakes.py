"""Hand-made RunResults for the report tests (no training)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dpcore.results import RunResult


def per_class(supports: list[int], recalls: list[float], precisions: list[float],
              names: list[str] | None = None) -> list[dict[str, Any]]:
    names = names or [str(k) for k in range(len(supports))]
    return [{"index": k, "name": names[k], "support": s, "recall": r, "precision": p,
             "auc": 0.5} for k, (s, r, p) in enumerate(zip(supports, recalls, precisions,
                                                          strict=True))]


def fake_result(*, dataset: str = "mnist5k", backend: str = "tf", seed: int = 0,
                point: str = "eps=1", mechanism: str = "dpsgd-gaussian", epsilon: float = 1.0,
                accuracy: float = 0.9, clip: float = 1.0, labels: dict[str, str] | None = None,
                classes: list[dict[str, Any]] | None = None, epochs: int = 3,
                faithfulness: dict[str, Any] | None = None) -> RunResult:
    """A finished run; ``labels`` default to {"data": dataset, "privacy": point}."""
    labels = labels if labels is not None else {"data": dataset, "privacy": point}
    config_hash = f"{abs(hash((dataset, point, seed, tuple(labels.items())))) % 10**16:016x}"
    classes = classes or per_class([50, 50], [accuracy, accuracy], [accuracy, accuracy],
                                   ["cat", "dog"])
    return RunResult(
        run_id=f"{config_hash}-{backend}", config_hash=config_hash, backend=backend, seed=seed,
        status="finished",
        config={"data": {"name": dataset}, "model": {"name": "cnn4"},
                "train": {"epochs": epochs},
                "privacy": {"mechanism": mechanism, "max_grad_norm": clip,
                            "target_epsilon": None if mechanism == "none" else epsilon}},
        privacy={"mechanism": mechanism, "epsilon_rdp": None if mechanism == "none" else epsilon},
        metrics={"accuracy": accuracy, "auc": accuracy, "n_classes": len(classes),
                 "per_class": classes},
        history=[{"epoch": e + 1, "test_accuracy": accuracy * (e + 1) / epochs,
                  "test_loss": 1.0 / (e + 1), "loss": 1.0, "epsilon_spent": epsilon}
                 for e in range(epochs)],
        timing={"epoch_seconds": [2.0, 1.0, 1.0]}, labels=labels,
        dataset={"n_train": 100, "n_test": 100, "fingerprint": "f"},
        faithfulness=faithfulness,
    )


def as_scatternet_run(run: RunResult, cached: bool) -> RunResult:
    """``run`` made a ``scatter-linear`` run on 28x28x1 images that computed its fixed front
    end (the scattering) once per data set (``cached``) or in every step (no cache record)."""
    run.config["model"] = {"name": "scatter-linear", "activation": "relu"}
    run.dataset.update({"input_shape": [28, 28, 1], "n_classes": 2})
    run.perf = {"fixed_front_cached": "scatter, scatter_gn"} if cached else {}
    return run


def render_section(section: Any, results: Sequence[RunResult], **context: Any) -> Any:
    """``section`` rendered through the public protocol (:class:`compare.reporting.section.
    Section`) on the report data of ``results`` (context: a test command, plus ``context``)."""
    from compare.report_context import ReportContext
    from compare.reporting.pipeline import report_data

    return section.render(report_data(results, ReportContext(command="test", **context)))


def section_text(section: Any, results: Sequence[RunResult], **context: Any) -> str:
    """The markdown of :func:`render_section`, one string."""
    return "\n".join(render_section(section, results, **context).lines)
