"""seqvae.explore.server and ``seqvae explore``'s one-line errors (no page is served)."""

import socket
import sys

import pytest

from seqvae import cli
from seqvae.errors import SeqvaeError
from seqvae.explore import server


def test_a_port_in_use_is_a_one_line_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SeqvaeError, match=f"cannot listen on 127.0.0.1:{port}.*--port"):
            server.check_port("127.0.0.1", port)
    with pytest.raises(SeqvaeError, match="port must be from 1 to 65535"):
        server.check_port("127.0.0.1", 70000)


def test_cli_errors_are_one_line(tmp_path, capsys, monkeypatch):
    assert cli.main(["explore", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.strip().endswith("nowhere: no such run directory")
    monkeypatch.setitem(sys.modules, "dash", None)
    assert cli.main(["explore", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == "seqvae: error: seqvae explore needs Dash: pip install 'seqvae[explore]'\n"


def test_cli_defaults_bind_to_this_machine():
    args = cli.build_parser().parse_args(["explore", "runs/demo"])
    assert (args.host, args.port, args.n, args.molecules, args.projection) == (
        "127.0.0.1", 8050, 5000, "moses:test", "pca")
