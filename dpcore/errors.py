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


class PrivacyConfigError(ConfigError, PrivacyError):
    """A configuration value refused because it would make the reported epsilon false.

    Both a :class:`ConfigError` (it is a bad config value) and a :class:`PrivacyError` (the
    message states the privacy reason).
    """


class PrivacyWarning(UserWarning):
    """A legal setting whose privacy guarantee is weak (e.g. a delta not below 1/N).

    The CLI prints it as one line ``dpcompare CMD: warning: ...`` on stderr.
    """
