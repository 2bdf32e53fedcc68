"""Exception types of the bench.

Every error a user can cause is a :class:`DpCompareError`. The CLI turns one into a single line
on stderr and exit status 2; anything else is a bug and keeps its traceback.
"""


class DpCompareError(Exception):
    """Base class of all user-facing errors: the message names the bad value and what is valid."""


class ConfigError(DpCompareError, ValueError):
    """An invalid configuration key or value."""


class DataError(DpCompareError):
    """A data set that is missing, unreadable or malformed."""


class CheckpointChangedError(DataError):
    """A checkpoint whose bytes are not the ones its run's record digested (SHA-256)."""


class PrivacyError(DpCompareError):
    """A setting that would make the reported privacy guarantee false."""


class PrivacyConfigError(ConfigError, PrivacyError):
    """A configuration value refused because it would make the reported epsilon false.

    Both a :class:`ConfigError` (it is a bad config value) and a :class:`PrivacyError` (the
    message states the privacy reason).
    """


class PrivacyWarning(UserWarning):
    """A legal setting whose privacy guarantee is weak (e.g. a delta not below 1/N).

    The CLI prints it as one line ``dpcompare CMD: warning: ...`` on stderr.
    """


class StorageError(DpCompareError, OSError):
    """A write refused by the storage: no space left, a quota, a read-only or forbidden folder.

    Also an :class:`OSError` (``errno`` is the refusing call's), so code that already treats a
    failed write as an OSError (e.g. a data-cache write, which only warns) keeps doing so. The
    message is one line naming the folder and what the write needed (bytes, when known); the
    CLI exits with its own status for it (``EXIT_STORAGE`` of :mod:`compare.cli.main`), not the
    status of a user error refused before anything was written.

    Attributes:
        folder: the folder the write went to.
        needed: bytes the write needed, or None when unknown.
    """

    def __init__(self, message: str, *, errno: int | None = None,
                 folder: str | None = None, needed: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno
        self.folder = folder
        self.needed = needed

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""
