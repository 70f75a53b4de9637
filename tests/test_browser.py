"""The quickstart notebook in a real JupyterLab, driven by Debian's Chromium through Playwright:
run all cells, wait for the dashboard chart, check it has points and a band, save a screenshot
to test-artifacts/dashboard.png. Everything stays on 127.0.0.1; no browser is downloaded."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.conftest import TINY_SESSION

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = ROOT / "test-artifacts"
TINY = TINY_SESSION
RUN_TIMEOUT_MS = 480_000  # kernel start + Ray start + the run, on a busy 2-core machine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    """JupyterLab on 127.0.0.1 serving a temp folder that holds a parameterized quickstart copy."""
    import nbformat
    import papermill.parameterize as pmp
    from papermill.iorw import load_notebook_node

    from workbench.kernel import install

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (`make browser` or `apt-get install -y chromium`)")
    root = tmp_path / "lab"
    root.mkdir()
    nb = load_notebook_node(str(ROOT / "notebooks" / "quickstart.ipynb"))
    params = {"max_steps": 10, "overrides": {**TINY, "out_dir": str(tmp_path / "run")},
              "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "experiment": "browser"}
    nbformat.write(pmp.parameterize_notebook(nb, params), root / "quickstart.ipynb")
    prefix = tmp_path / "kernel"
    install(prefix=str(prefix))
    env = {**os.environ, "JUPYTER_PATH": str(prefix / "share" / "jupyter"), "JUPYTER_CONFIG_DIR": str(tmp_path / "cfg"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"), "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "ws")}
    port, token = free_port(), uuid.uuid4().hex
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True",
           "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
           "--ServerApp.open_browser=False", "--LabApp.extension_manager=readonly"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    log = open(tmp_path / "jupyter.log", "w")
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            if proc.poll() is not None:
                pytest.fail(f"jupyter lab exited: {(tmp_path / 'jupyter.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                    json.loads(r.read())
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("jupyter lab did not answer within 120 s")
        yield base, token, tmp_path
    finally:
        proc.send_signal(signal.SIGINT)  # twice: Jupyter asks for confirmation on the first
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()  # our own process group only (start_new_session)
            proc.wait()
        log.close()


def test_dashboard_renders_in_jupyterlab(lab):
    from playwright.sync_api import sync_playwright

    base, token, tmp = lab
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "dashboard.png"
    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=args)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1400})
            page.goto(f"{base}/lab/tree/quickstart.ipynb?token={token}")
            page.wait_for_function("() => window.jupyterapp && document.querySelector('.jp-Notebook')", timeout=120_000)
            # kernel ready (the status toolbar says Idle), then Run > Run All Cells
            page.wait_for_function(
                "() => { const w = window.jupyterapp.shell.currentWidget;"
                " return w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel"
                " && w.sessionContext.session.kernel.status === 'idle'; }", timeout=120_000)
            page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
            dash = page.locator(".workbench-dashboard")
            dash.wait_for(timeout=RUN_TIMEOUT_MS)
            # the fitted chart: the band (an area mark) appears once 4 evaluations exist
            page.wait_for_selector(".workbench-dashboard .wb-chart svg .mark-area path", timeout=RUN_TIMEOUT_MS)
            # the run ends (last code cell prints where the fit was logged)
            page.wait_for_function("() => document.body.innerText.includes('fit logged to MLflow run')", timeout=RUN_TIMEOUT_MS)
            page.wait_for_timeout(500)
            dash.scroll_into_view_if_needed()
            dash.screenshot(path=str(shot))
            page.screenshot(path=str(ARTIFACTS / "quickstart-page.png"), full_page=False)
            points = page.locator(".workbench-dashboard .wb-chart svg .mark-symbol path").count()
            band = page.locator(".workbench-dashboard .wb-chart svg .mark-area path").count()
            text = dash.inner_text()
            errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").all_inner_texts()
        finally:
            browser.close()
    assert points >= 5, f"expected the 5+ evaluation points in the chart, found {points}"
    assert band >= 1
    assert "finished" in text and "10 / 10 steps" in text  # header and progress
    assert "A = " in text and "forecast at" in text  # fit parameters and forecast under the chart
    assert "reward" in text and "entropy" in text  # train metrics
    assert not any("Traceback" in e for e in errors), errors
    assert shot.stat().st_size > 10_000
    shutil.copy(shot, tmp / "dashboard.png")
