"""The ``seqvae`` command line: it parses arguments and calls the library, nothing more.

Errors in the user's input are ``SeqvaeError`` s: printed as one line, exit status 2. The
commands live in ``train_commands`` and ``use_commands``, the parser in ``parser``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

from seqvae.cli.parser import build_parser, parse_duration, parse_fractions

__all__ = ["build_parser", "main", "parse_duration", "parse_fractions"]


def _quiet_tensorflow() -> None:
    """Imports TensorFlow with its start-up log lines (oneDNN, CUDA probing) silenced.

    TensorFlow's C++ logging writes them before ``TF_CPP_MIN_LOG_LEVEL`` is read, so file
    descriptor 2 is pointed at /dev/null for the import. Set SEQVAE_TF_LOGS=1 to see them.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if os.environ.get("SEQVAE_TF_LOGS"):
        return
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        import tensorflow  # noqa: F401
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


class _Terminated(Exception):
    """SIGTERM, raised where the command is: it unwinds like Ctrl-C (temporary files removed)."""


def _on_sigterm(*_) -> None:
    raise _Terminated


def main(argv: list[str] | None = None) -> int:
    from seqvae import messages, runtime

    runtime.tune_process()  # before TensorFlow is imported, or it never reads the settings
    args = build_parser().parse_args(argv)
    messages.show_on_stderr()  # the library's notes and progress lines
    _quiet_tensorflow()
    from seqvae.errors import SeqvaeError

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _on_sigterm)  # train: a checkpoint, then stop
    try:
        return args.func(args)
    except SeqvaeError as error:
        print(f"seqvae: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("seqvae: interrupted", file=sys.stderr)
        return 130
    except _Terminated:
        print("seqvae: terminated", file=sys.stderr)
        return 143
    except BrokenPipeError:
        return 0
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
