"""io.body: when two validators describe different objects, and how read failures are sorted.

Pure logic; the stores' open_from is tested against real servers beside each store's tests."""

from __future__ import annotations

import pytest

from feedline.io import (
    AccessDeniedError,
    NotFoundError,
    ObjectValidator,
    RangeError,
    TransientError,
)
from feedline.io.body import read_error, restart_reason

SEEN = ObjectValidator(100, '"abc"', "Tue, 01 Oct 2024 10:00:00 GMT", "v1")


def test_validators_differ_only_on_a_field_both_know() -> None:
    assert not SEEN.differs(SEEN)
    assert not ObjectValidator(100, '"abc"').differs(SEEN)  # no date on one side: not a difference
    assert ObjectValidator(100, '"other"').differs(SEEN)
    assert ObjectValidator(100, None, "Wed, 02 Oct 2024 10:00:00 GMT").differs(SEEN)
    assert ObjectValidator(99).differs(SEEN) and not ObjectValidator(None).differs(SEEN)


def test_weak_etags_and_dates() -> None:
    assert ObjectValidator(1, 'W/"x"').strong_etag is None and SEEN.strong_etag == '"abc"'
    assert SEEN.modified_epoch == 1727776800.0
    assert ObjectValidator(1, None, "1727776800.5").modified_epoch is None  # a local mtime
    assert not ObjectValidator(1).usable and ObjectValidator(1, 'W/"x"').usable


def test_restart_reason() -> None:
    assert restart_reason(0, None, SEEN) == ""  # from 0 nothing is restarted
    assert restart_reason(50, SEEN, SEEN) == ""
    assert "changed" in restart_reason(50, None, SEEN)  # nothing to compare with: from 0
    assert "changed" in restart_reason(50, ObjectValidator(100, '"other"'), SEEN)
    assert "changed" in restart_reason(50, ObjectValidator(100), ObjectValidator(100))  # unguarded


@pytest.mark.parametrize(
    ("raised", "kind", "text"),
    [
        (FileNotFoundError("x"), NotFoundError, "no such object; check the URL"),
        (PermissionError("x"), AccessDeniedError, "access denied"),
        (RangeError("u: past the end", 5), RangeError, "past the end"),
        (type("FileExpired", (OSError,), {})("etag"), TransientError, "object replaced while reading"),
        (ValueError("https://u:secret@h/x?token=t"), TransientError, "ValueError"),
    ],
)
def test_read_errors_are_sorted(raised: BaseException, kind: type, text: str) -> None:
    error = read_error("s3://b/k", raised)
    assert isinstance(error, kind) and text in str(error)
    assert "secret" not in str(error) and "token=t" not in str(error)
