"""Starting the explorer: load the run, build (or read) the map, trace the model, serve."""

from __future__ import annotations

import logging
import socket

from seqvae.errors import SeqvaeError
from seqvae.messages import note


def check_port(host: str, port: int) -> None:
    """A one-line error when ``host:port`` cannot be bound (in use, or not an address here)."""
    if not 0 < port < 65536:
        raise SeqvaeError(f"the port must be from 1 to 65535, got {port}")
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as error:
        raise SeqvaeError(f"cannot listen on {host}:{port} ({error.strerror}); "
                          "choose another --port or --host") from None


def serve(run_dir: str, molecules="moses:test", n: int = 5000, port: int = 8050,
          host: str = "127.0.0.1", projection: str = "pca") -> None:
    """Serves the explorer of ``run_dir`` at ``http://host:port/`` until interrupted.

    The page needs nothing from the internet: Dash serves its scripts from the package.
    """
    from seqvae.explore.app import build_app, require_dash

    from seqvae.explore.explorer import Explorer
    from seqvae.explore.latent_map import build_map
    from seqvae.explore.property_head import find_property_head
    from seqvae.run import load_run, read_run_files

    require_dash()  # these checks before the minutes of loading, not after
    read_run_files(run_dir)
    check_port(host, port)

    run = load_run(run_dir)
    if not run.codec.molecules:
        raise SeqvaeError(f"{run_dir}: seqvae explore draws molecules; this run's notation is "
                          f"{run.info['tokenizer']!r}")
    latent_map = build_map(run, molecules, n, projection)
    explorer = Explorer(run, latent_map, find_property_head(run))
    _note("tracing the decoders")
    explorer.warm_up(on_beam_ready=lambda: _note("beam search traced: the beam switch answers "
                                                  "without waiting"))
    app = build_app(explorer)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    if host not in ("127.0.0.1", "localhost", "::1"):
        _note(f"listening on {host}: the page has no password, anyone who can reach it can use it")
    _note(f"open http://{'[' + host + ']' if ':' in host else host}:{port}/ (Ctrl-C to stop)")
    app.run(host=host, port=port, debug=False, threaded=True)


def _note(line: str) -> None:
    note(f"seqvae explore: {line}")
