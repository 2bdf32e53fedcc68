"""The config hash a run had before the noise key and the default-delta rule entered it.

A DP-SGD run's hash now carries its resolved ``privacy.noise_key`` and the key derivation's
version, and a private run that leaves delta unset carries the default-delta rule's version
(:attr:`dpcore.config.RunConfig.config_hash`): every committed run's hash moved on purpose.
The tests that guard committed presets against *accidental* changes compare with the hash the
runs were committed under, computed here the way it was computed then: the SHA-256 of the
canonical JSON of ``to_dict()`` (a pretrained file by its SHA-256), nothing added.
"""

from __future__ import annotations

import hashlib
import json

from dpcore.config import RunConfig, file_sha256


def hash_before_noise_key(config: RunConfig) -> str:
    """``config``'s hash under the rule before noise keys (a config that sets
    ``privacy.noise_key`` did not exist then: its to_dict carries the key as given)."""
    raw = config.to_dict()
    if config.model.pretrained is not None:
        raw["model"]["pretrained"] = f"sha256:{file_sha256(config.model.pretrained)}"
    canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]
