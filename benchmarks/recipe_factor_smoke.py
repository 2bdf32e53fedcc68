"""Smoke run of every factor switch of the harmonised recipe on one backend.

``python -m benchmarks.recipe_factor_smoke tf|torch [DATA_DIR]``: sklearn's digits at 16x16,
cnn4, 3 epochs, batch 64, lr 0.5, noise 1.0, one seed; prints one JSON line per variant
(accuracy, noise, shared epsilons, privacy claim, seconds). One seed on 1,437 images shows that
each switch runs and is recorded, not how much it matters (that is mnist-gap-attribution's job).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence

from dpcore.backend import load_backend
from dpcore.config import PerfSpec, RunConfig
from dpcore.pipeline import prepare_dataset

BASE = {"data": {"name": "digits", "image_size": 16}, "model": {"name": "cnn4"},
        "privacy": {"mechanism": "dpsgd-gaussian", "noise_multiplier": 1.0, "delta": 1e-5},
        "train": {"epochs": 3, "batch_size": 64, "lr": 0.5}, "seed": 0}
TARGET = ["privacy.noise_multiplier=null", "privacy.target_epsilon=3"]
VARIANTS: dict[str, list[str]] = {
    "harmonised": [],
    "sampling=shuffle": ["privacy.sampling=shuffle"],
    "normalisation=actual": ["factors.normalisation=actual"],
    "microbatch k=4 (+shuffle, /count)": ["privacy.sampling=shuffle",
                                          "factors.microbatch_size=4",
                                          "factors.normalisation=microbatches"],
    "init=torch": ["factors.init=torch"],
    "input_scaling=standardised": ["factors.input_scaling=standardised"],
    "eval_split=train": ["factors.eval_split=train"],
    "target eps 3, calibration pld": [*TARGET, "factors.calibration_accountant=pld"],
    "target eps 3, calibration rdp": TARGET,
}


def main(argv: Sequence[str]) -> int:
    backend = argv[0]
    module = load_backend(backend)
    base = RunConfig.from_dict(BASE)
    data = prepare_dataset(base, argv[1] if len(argv) > 1 else None)
    for name, overrides in VARIANTS.items():
        config = base.with_overrides(overrides)
        start = time.perf_counter()
        result = module.train(config, data, PerfSpec(), progress=False).result
        privacy = result.privacy
        print(json.dumps({
            "backend": backend, "variant": name, "acc": round(result.metrics["accuracy"], 3),
            "noise": round(privacy["noise_multiplier"], 4),
            "eps_rdp": round(privacy["epsilon_rdp"], 3),
            "eps_pld": round(privacy["epsilon_pld"], 3),
            "claim": result.recipe["privacy_claim"]["status"],
            "s": round(time.perf_counter() - start, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
