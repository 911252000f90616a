"""The one exception type for bad user input, and the one did-you-mean helper.

Anything a user can get wrong (a path, a flag, a file's contents) raises `UserError` with one sentence
that names the input and says what is accepted. The CLI prints it without a traceback and exits 2.
"""

from __future__ import annotations

import difflib
from typing import Iterable


class UserError(Exception):
    """Bad input from the user: the message is shown as-is, the process exits with status 2."""

    exit_code = 2


def suggest(word: object, allowed: Iterable[object], prefix: str = "") -> str:
    """' (did you mean X?)' for the closest of `allowed` to `word`, or '' when none is close; `prefix` is put
    before the suggestion (e.g. a section name: 'train.')."""
    close = difflib.get_close_matches(str(word), [str(a) for a in allowed], n=1)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""
