"""The worker of :mod:`benchmarks.case_process`: ``python -m benchmarks.case_worker JSON``
runs one benchmark case (:func:`benchmarks.bench.run_case`) in this fresh process, its
progress on stderr (prefixed by :data:`benchmarks.case_process.LOG_PREFIX`) and its figures
as JSON on the last line of stdout."""

from __future__ import annotations

import json
import sys
from typing import Any

from benchmarks.case_process import LOG_PREFIX, history_from_json, history_to_json


def _worker(raw: str) -> int:
    """One case from its JSON spec; its JSON on stdout's last line."""
    from benchmarks import bench
    from benchmarks.runtime import configure

    spec = json.loads(raw)
    fields = dict(spec["case"])
    fields["tiers"] = tuple(fields["tiers"])
    case = bench.Case(**fields)
    configure()

    def log(message: str) -> None:
        print(LOG_PREFIX + message, file=sys.stderr, flush=True)

    data = bench.load_data(case.data, spec["quick"], spec["data_dir"])
    table = spec.get("layers")
    if table is not None:  # one per-layer table, alone in this process
        from benchmarks.layer_costs import layer_costs

        log(f"[{case.name}] per-layer costs of the fast DP step ({table})")
        result: dict[str, Any] = {"layers": layer_costs(
            bench.model_case(case, data), case.tiers, spec["roofline"], only=table)}
    else:
        history = history_from_json(spec["history"])
        figures = bench.run_case(case, data, log, compile_steps=spec["compile_steps"],
                                 roofline=spec["roofline"], compile_history=history,
                                 layers=False)
        result = {"figures": figures, "data": data.description,
                  "history": history_to_json(history)}
    print(json.dumps(result, default=_plain))
    return 0


def _plain(value: Any) -> Any:
    """NumPy scalars and arrays as Python numbers and lists (non-finite floats stay: JSON's
    Infinity and NaN read back as they were)."""
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON-able")


if __name__ == "__main__":
    sys.exit(_worker(sys.argv[1]))
