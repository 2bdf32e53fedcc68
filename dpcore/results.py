"""RunResult records (versioned JSON schema), atomic writes, and the results store.

Layout of a store rooted at ``ROOT``::

    ROOT/runs/<config_hash>-<backend>/result.json     the RunResult
    ROOT/runs/<config_hash>-<backend>/checkpoint.*    the trained weights (backend format)

Writes are atomic (:func:`dpcore.io.atomic_write_json`: temporary file in the same folder,
fsync, ``os.replace``), so a killed process leaves either the previous file or the new one,
never half a file. Non-finite floats (NaN, inf) are written as JSON ``null``
(:func:`dpcore.io.json_safe`): a non-private run's epsilon is null with
``privacy.mechanism == "none"``; a diverged run says so in ``status``.
"""

from __future__ import annotations

import json
import platform
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from functools import cache
from importlib import metadata, resources
from pathlib import Path
from typing import Any

import jsonschema

from dpcore.errors import DpCompareError
from dpcore.io import atomic_write_bytes, atomic_write_json, json_safe

__all__ = [  # atomic_write_bytes / atomic_write_json / json_safe: re-exported from dpcore.io
    "BACKENDS", "RESULT_FILE", "SCHEMA_VERSION", "STATUSES", "ResultsStore", "RunResult",
    "atomic_write_bytes", "atomic_write_json", "json_safe", "library_versions", "read_result",
    "run_id", "utc_now", "validate_result_dict",
]

#: Backend names a RunResult may hold (their code: :func:`dpcore.backend.load_backend`).
BACKENDS = ("tf", "torch")
SCHEMA_VERSION = 1
RESULT_FILE = "result.json"
STATUSES = ("running", "finished", "diverged", "failed", "interrupted")
#: Statuses of a run that is final: never trained again, by a grid or a claim, and counted as
#: finished when its record is committed (the one rule; :meth:`ResultsStore.is_finished`).
FINAL_STATUSES = ("finished", "diverged")

#: Distributions whose versions every RunResult records.
TRACKED_PACKAGES = (
    "numpy", "dp-accounting", "tensorflow", "tensorflow-privacy", "keras", "torch", "opacus",
)


@dataclass
class RunResult:
    """One run of one backend; see ``dpcore/schemas/run_result.v1.json`` for the schema."""

    run_id: str
    config: dict[str, Any]
    config_hash: str
    backend: str
    seed: int
    status: str = "running"
    versions: dict[str, str] = field(default_factory=dict)
    dataset: dict[str, Any] = field(default_factory=dict)
    privacy: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    faithfulness: dict[str, Any] | None = None
    audit: dict[str, Any] | None = None
    timing: dict[str, Any] = field(default_factory=dict)
    perf: dict[str, Any] = field(default_factory=dict)
    checkpoint: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    error: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    grid: str | None = None
    recipe: dict[str, Any] | None = None
    #: dotted config key -> value, for every key the bench's defaults filled in
    #: (:func:`dpcore.defaults.fill_defaults`); empty when the user gave them all
    defaults: dict[str, Any] = field(default_factory=dict)
    #: the final test logits, labels and groups, for test sets small enough
    #: (:mod:`dpcore.outputs`); None: not kept (and left out of :meth:`to_dict`)
    test_outputs: dict[str, Any] | None = None
    schema_version: int = SCHEMA_VERSION
    #: hex SHA-256 of the checkpoint file's bytes as the run stored it (checked before the
    #: checkpoint is loaded, :func:`dpcore.trained.recorded_checkpoint`); None (and absent
    #: from the JSON) for a run stored without a checkpoint or before digests were kept
    checkpoint_sha256: str | None = None
    #: what produced the run (:func:`dpcore.provenance.provenance_record`: the training
    #: sources' digest, git commit, package versions, CPU and its instruction-set flags,
    #: threads, device); None in a record written without it (left out of :meth:`to_dict`,
    #: so such a record is written back byte for byte as it was read)
    provenance: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (:func:`dpcore.io.json_safe`); ``test_outputs``,
        ``checkpoint_sha256`` and ``provenance`` only when present, so a record without them
        has the same keys and bytes whether or not it could hold them."""
        raw = json_safe(asdict(self))
        for optional in ("test_outputs", "checkpoint_sha256", "provenance"):
            if raw.get(optional) is None:
                raw.pop(optional, None)
        return raw

    @property
    def run_config(self) -> Any:
        """The run's configuration as a :class:`~dpcore.config.RunConfig` (``config`` is its
        JSON mapping, as stored)."""
        from dpcore.config import RunConfig

        return RunConfig.from_dict(self.config)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RunResult:
        validate_result_dict(raw)
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in raw.items() if k in known})


def run_id(config_hash: str, backend: str) -> str:
    """The run's folder name: ``<config_hash>-<backend>``."""
    if backend not in BACKENDS:
        raise DpCompareError(f"backend={backend!r} is not known; valid: {', '.join(BACKENDS)}")
    return f"{config_hash}-{backend}"


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def installed_versions(names: Iterable[str]) -> dict[str, str]:
    """Installed version of each distribution of ``names`` (those not installed left out)."""
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def library_versions() -> dict[str, str]:
    """Installed versions of the tracked packages plus Python and the platform."""
    return {"python": platform.python_version(), "platform": platform.platform(),
            **installed_versions(TRACKED_PACKAGES)}


@cache
def _schema() -> dict[str, Any]:
    text = resources.files("dpcore").joinpath("schemas/run_result.v1.json").read_text("utf-8")
    return json.loads(text)


@cache
def _validator() -> Any:
    """The RunResult schema's validator, built once: the schema is checked against its
    meta-schema here, not per record (``jsonschema.validate`` re-checks it on every call, which
    made reading the ~1,500 committed records take over a minute)."""
    schema = _schema()
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    return validator_class(schema)


def validate_result_dict(raw: Any) -> None:
    """Raise DpCompareError if ``raw`` does not follow the RunResult schema (the error named is
    the one ``jsonschema.validate`` would raise: ``best_match`` of all errors)."""
    if not isinstance(raw, dict):
        raise DpCompareError("a RunResult must be a JSON object")
    error = jsonschema.exceptions.best_match(_validator().iter_errors(raw))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise DpCompareError(f"RunResult field {where}: {error.message}")


class ResultsStore:
    """A folder of runs keyed by ``<config_hash>-<backend>``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    @property
    def runs_dir(self) -> Path:
        return self.root / "runs"

    def run_dir(self, config_hash: str, backend: str) -> Path:
        return self.runs_dir / run_id(config_hash, backend)

    def ensure_writable(self) -> None:
        """Create the store folder or raise DpCompareError naming it if it is not writable."""
        try:
            self.runs_dir.mkdir(parents=True, exist_ok=True)
            probe = tempfile.NamedTemporaryFile(dir=self.runs_dir, prefix=".probe", delete=True)
            probe.close()
        except OSError as exc:
            raise DpCompareError(
                f"output folder {self.root} is not writable ({exc.strerror}); "
                "choose a folder you can write to with --out"
            ) from exc

    def save(self, result: RunResult) -> Path:
        """Validate and atomically write ``result``; returns the file path."""
        raw = result.to_dict()
        validate_result_dict(raw)
        path = self.run_dir(result.config_hash, result.backend) / RESULT_FILE
        atomic_write_json(path, raw)
        return path

    def load(self, config_hash: str, backend: str) -> RunResult | None:
        """The stored result of a run, or None if absent or unreadable (with a warning)."""
        return read_result(self.run_dir(config_hash, backend) / RESULT_FILE)

    def is_finished(self, config_hash: str, backend: str) -> bool:
        """True when a valid result with a final status (finished or diverged) is stored."""
        result = self.load(config_hash, backend)
        return result is not None and result.status in FINAL_STATUSES

    def iter_results(self) -> Iterator[RunResult]:
        """All readable results, sorted by run id; unreadable ones are skipped with a warning."""
        if not self.runs_dir.is_dir():
            return
        for path in sorted(self.runs_dir.glob(f"*/{RESULT_FILE}")):
            result = read_result(path)
            if result is not None:
                yield result

    def list_runs(self) -> list[RunResult]:
        return list(self.iter_results())


def read_result(path: str | Path) -> RunResult | None:
    """Read one result file; a missing file gives None, an unreadable one a warning and None."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return RunResult.from_dict(raw)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, DpCompareError, TypeError) as exc:
        warnings.warn(f"skipping unreadable run record {path}: {exc}", stacklevel=2)
        return None
