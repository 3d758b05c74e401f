"""Hide credentials in any text: ``user:password@`` in URLs and secret-looking query values.

:func:`redact_url` turns one URL into its credential-free form (no userinfo, no query): the
name a store shows for an object. :func:`redact_text` is the net for everything else: error
messages that quote a URL, exception texts from libraries, and log records (``feedline`` installs
:class:`RedactingFilter` on its log handlers, so urllib3's debug log under ``-vv`` never prints a
query token either). One module, so every part hides the same things the same way.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

#: ``scheme://user:password@`` or ``scheme://token@``: the userinfo goes.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@?#\"'<>]+@")
#: ``?token=...`` / ``&X-Amz-Signature=...``: a query parameter whose name looks like a secret.
_SECRET_PARAM = re.compile(
    r"(?i)([?&;](?:[^=&;\s\"'#]*(?:token|secret|passw|pwd|signature|sig|key|auth|credential|session|"
    r"code|jwt|bearer)[^=&;\s\"'#]*)=)(?!\*\*\*)[^&;\s\"'#]*"
)
MASK = "***"  # a value already masked is left alone: redacting twice changes nothing


def redact_url(url: str) -> str:
    """``url`` without user:password or query string, which may carry credentials/tokens."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address keeps its brackets
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def redact_text(text: str) -> str:
    """``text`` with URL userinfo and secret-looking query values replaced by ``***``."""
    if "@" in text:
        text = _USERINFO.sub(rf"\1{MASK}@", text)
    if "=" in text:
        text = _SECRET_PARAM.sub(rf"\g<1>{MASK}", text)
    return text


#: A mapping key whose value is a credential (s3fs' ``key``/``secret``, a Hub ``token``, an
#: ``Authorization`` header ...).
_SECRET_KEY = re.compile(r"(?i)token|secret|passw|pwd|signature|key|auth|credential|session|cookie|bearer")


def redact_mapping(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` (storage options, headers) as they may be shown: the value of every
    secret-looking key masked, nested mappings alike, other text through :func:`redact_text`."""
    shown: dict[str, Any] = {}
    for key, value in options.items():
        if isinstance(value, Mapping):
            shown[key] = redact_mapping(value)
        elif _SECRET_KEY.search(str(key)):
            shown[key] = MASK
        else:
            shown[key] = redact_text(value) if isinstance(value, str) else value
    return shown


def redacted_repr(obj: Any, options: tuple[str, ...] = ("storage_options",)) -> str:
    """A dataclass's repr with its text fields redacted and its ``options`` fields through
    :func:`redact_mapping`: the repr of a source naming a credentialed root or store options."""
    parts = []
    for name in obj.__dataclass_fields__:
        value = getattr(obj, name)
        if name in options and isinstance(value, Mapping):
            value = redact_mapping(value)
        elif isinstance(value, str):
            value = redact_text(value)
        parts.append(f"{name}={value!r}")
    return f"{type(obj).__name__}({', '.join(parts)})"


class RedactingFilter(logging.Filter):
    """A handler filter that redacts each record's final message (and its exception text)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: leave it for logging's own error report
            return True
        clean = redact_text(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact_text(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        return True


def install_log_redaction(logger: logging.Logger | None = None) -> None:
    """Add :class:`RedactingFilter` to every handler of ``logger`` (the root logger by default)."""
    target = logger or logging.getLogger()
    for handler in target.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
