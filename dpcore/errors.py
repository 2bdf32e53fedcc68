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


class PrivacyError(DpCompareError):
    """A setting that would make the reported privacy guarantee false."""
