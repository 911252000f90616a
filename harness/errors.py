"""The one exception type for bad user input.

Anything a user can get wrong (a path, a flag, a file's contents) raises `UserError` with one sentence
that names the input and says what is accepted. The CLI prints it without a traceback and exits 2.
"""


class UserError(Exception):
    """Bad input from the user: the message is shown as-is, the process exits with status 2."""

    exit_code = 2
