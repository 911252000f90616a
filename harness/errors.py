"""The one exception type for bad user input, the one warning type for a degraded run, and the one
did-you-mean helper.

Anything a user can get wrong (a path, a flag, a file's contents) raises `UserError` with one sentence
that names the input and says what is accepted. The CLI prints it without a traceback and exits 2.
"""

from __future__ import annotations

import difflib
from typing import Iterable


class UserError(Exception):
    """Bad input from the user: the message is shown as-is, the process exits with status 2."""

    exit_code = 2


class HarnessWarning(UserWarning):
    """A run goes on, but not as asked (a corrupted checkpoint skipped, a fast path unavailable). Raised with
    `warnings.warn`: the CLI prints it as one line, and a study's trial records it in its MLflow child run
    and sends it to the driver's terminal (harness/trial.py)."""


def one_line_warning(message, category, filename, lineno, line=None) -> str:
    """`warnings.formatwarning` for the CLI: one line, no source excerpt."""
    kind = "" if issubclass(category, HarnessWarning) else f" ({category.__name__})"
    return f"warning{kind}: {message}\n"


def suggest(word: object, allowed: Iterable[object], prefix: str = "") -> str:
    """' (did you mean X?)' for the closest of `allowed` to `word`, or '' when none is close; `prefix` is put
    before the suggestion (e.g. a section name: 'train.')."""
    close = difflib.get_close_matches(str(word), [str(a) for a in allowed], n=1)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""
