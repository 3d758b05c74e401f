"""The root of feedline's error types.

Each part derives its own error (``StoreError``, ``DownloadError``, ``SidecarError`` ...) from
:class:`FeedlineError`, so the CLI can turn any of them into a one-line message and a non-zero
exit without hiding real bugs (which stay ordinary exceptions with a traceback).
"""

from __future__ import annotations


class FeedlineError(Exception):
    """A problem the user can act on; its message names the file/URL and the fix."""

    exit_code = 1
