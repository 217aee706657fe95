"""User-facing errors: raised for bad input, printed as one line by the CLIs and apps."""


class UserInputError(ValueError):
    """Bad input from the user (a config value, a path, a file's content).

    The message must say what is wrong and how to fix it, in one line; the command-line
    entry points print it without a traceback and exit non-zero.

    Parameters
    ----------
    message : str
        The line, as the local log or console shows it.
    reply : str, optional
        What a party's error reply to the server says instead, where the line holds facts that must
        stay on the party (default: the line itself).
    """

    def __init__(self, message: str, *, reply: str | None = None) -> None:
        super().__init__(message)
        self.reply = message if reply is None else reply


class RunFailed(RuntimeError):
    """A run that did not complete, after the command that ran it has said why.

    The message is one line (what is missing), or empty when the command that ran the run has said everything;
    the command-line entry points print it (if any) without a traceback and exit 1.
    """
