"""The one check of an output folder before anything is written, for the CLI and the API alike
(``--out``, ``--report``, ``out=``, ``dest=``...)."""

from __future__ import annotations

import os
from pathlib import Path

from dpcore.errors import ConfigError


def check_output_folder(path: str | Path, option: str, label: str | None = None) -> Path:
    """``path`` if it can become a writable folder; nothing is created.

    Walks up to the nearest existing ancestor: it must be a folder we may write to (a regular
    file on the way, e.g. ``--out somefile/sub``, fails with the file named).

    Args:
        path: the folder to check.
        option: the option (or parameter) that sets it, named in the advice
            ("choose a folder you can write to with --out").
        label: what the message calls the folder (default: ``option``), e.g.
            ``"output folder"``.

    Raises:
        ConfigError: ``"<label> <folder> is not writable: <why>; choose a folder you can
            write to with <option>"``.
    """
    target = Path(path).expanduser()
    probe = target
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    why = None
    if probe.exists() and not probe.is_dir():
        why = f"{probe} is a file, not a folder"
    elif probe.is_dir() and not os.access(probe, os.W_OK | os.X_OK):
        why = f"no write permission on {probe}"
    if why is not None:
        raise ConfigError(f"{label or option} {target} is not writable: {why}; "
                          f"choose a folder you can write to with {option}")
    return target


__all__ = ["check_output_folder"]
