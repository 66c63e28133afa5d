"""The one exception type that the command line turns into a one-line message."""


class SeqvaeError(Exception):
    """A problem with the user's input, data, configuration or run directory.

    The message is one line that says what is wrong and, where it helps, what to do. The CLI
    prints it as ``seqvae: error: <message>`` and exits with status 2; it never shows a traceback.
    """
