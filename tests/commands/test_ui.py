"""`workbench ui`: the MLflow UI over the project's store, on localhost."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from workbench.cli import main
from workbench.errors import UserError
from workbench.commands.ui import server_command


def test_server_command_uses_the_store_and_localhost(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cmd = server_command(uri, port=5001)
    assert cmd[1:4] == ["-m", "mlflow", "server"]
    assert cmd[cmd.index("--backend-store-uri") + 1] == uri
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--port") + 1] == "5001"
    assert cmd[cmd.index("--artifacts-destination") + 1] == str(tmp_path / "mlartifacts")
    with pytest.raises(UserError, match="already a tracking server"):
        server_command("http://127.0.0.1:5000")


def test_port_in_use_is_a_user_error(tracking_uri, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert main(["ui", "--port", str(port), "--tracking-uri", tracking_uri]) == 2
    assert f"port {port}" in capsys.readouterr().err


@pytest.mark.slow
def test_ui_serves_and_stops_with_its_server(tracking_uri, free_port):
    port = free_port
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench.cli", "ui", "--port", str(port), "--tracking-uri", tracking_uri],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        status, deadline = None, time.monotonic() + 150
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
                    status = r.status
                    break
            except OSError:
                time.sleep(1)
        assert status == 200, proc.stdout.read().decode()[-2000:] if proc.poll() is not None else "no answer"
        proc.terminate()  # SIGTERM to `workbench ui` must take the mlflow server down with it
        proc.wait(timeout=60)
        with socket.socket() as s:
            # SO_REUSEADDR: a connection left in TIME_WAIT does not count, a listening server does
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))  # the port is free again: no orphaned server
    finally:
        try:  # whatever is left in the session this test started
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


@pytest.mark.parametrize("host, reason", [("nosuchhost.invalid", "cannot bind to host nosuchhost.invalid"),
                                          ("192.0.2.1", "cannot bind to host 192.0.2.1")])  # TEST-NET: no address of ours
def test_a_host_that_cannot_be_bound_is_not_called_a_busy_port(tracking_uri, capsys, host, reason, free_port):
    assert main(["ui", "--host", host, "--port", str(free_port), "--tracking-uri", tracking_uri]) == 2
    err = capsys.readouterr().err
    assert reason in err and "in use" not in err


def test_ui_on_a_server_uri_says_whether_anything_answers(capsys, free_port):
    import http.server
    import threading

    dead = f"http://127.0.0.1:{free_port}/"
    assert main(["ui", "--tracking-uri", dead]) == 2
    err = capsys.readouterr().err
    assert f"nothing answers at {dead}" in err and "already a tracking server" not in err
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)  # answers (404 on /health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert main(["ui", "--tracking-uri", f"http://127.0.0.1:{server.server_port}"]) == 2
        assert "already a tracking server: open it in a browser" in capsys.readouterr().err
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("workers", ["0", "-2"])
def test_ui_refuses_fewer_than_one_worker(tracking_uri, capsys, workers):
    assert main(["ui", "--workers", workers, "--tracking-uri", tracking_uri]) == 2
    assert f"--workers must be at least 1, got {workers}" in capsys.readouterr().err
