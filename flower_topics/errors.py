"""User-facing errors: raised for bad input, printed as one line by the CLIs and apps."""


class UserInputError(ValueError):
    """Bad input from the user (a config value, a path, a file's content).

    The message must say what is wrong and how to fix it, in one line; the command-line
    entry points print it without a traceback and exit non-zero.
    """


class RunFailed(RuntimeError):
    """A run that did not complete, after the command that ran it has said why.

    The message is one line (what is missing); the command-line entry points print it
    without a traceback and exit 1.
    """
