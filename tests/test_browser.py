"""The quickstart notebook in a real JupyterLab, driven by Debian's Chromium through Playwright:
run all cells, wait for the dashboard chart, check it has points and a band, save a screenshot
to test-artifacts/dashboard.png. Then, in the same JupyterLab, a finished run folder's dashboard:
its health banner, the Samples tab filtered to failures, a group view and two evaluations side by
side, each saved as a screenshot (test-artifacts/dashboard-*.png, the manual's pictures). Everything
stays on 127.0.0.1; no browser is downloaded."""

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


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab on 127.0.0.1 serving a temp folder that holds a parameterized quickstart copy
    (one server for the module's tests: each opens its own notebook in it)."""
    import nbformat
    import papermill.parameterize as pmp
    from papermill.iorw import load_notebook_node

    from workbench.kernel import install

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (`make browser` or `apt-get install -y chromium`)")
    tmp_path = tmp_path_factory.mktemp("browser")
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


BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def run_all(page, url: str) -> None:
    """Open a notebook, wait for its kernel to be idle, then Run > Run All Cells."""
    page.goto(url)
    page.wait_for_function("() => window.jupyterapp && document.querySelector('.jp-Notebook')", timeout=120_000)
    page.wait_for_function(
        "() => { const w = window.jupyterapp.shell.currentWidget;"
        " return w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel"
        " && w.sessionContext.session.kernel.status === 'idle'; }", timeout=120_000)
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")


def test_dashboard_renders_in_jupyterlab(lab):
    from playwright.sync_api import sync_playwright

    base, token, tmp = lab
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "dashboard.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1400})
            run_all(page, f"{base}/lab/tree/quickstart.ipynb?token={token}")
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


def viewer_notebook(path: Path, code: str) -> None:
    """A one-cell notebook on the workbench kernel that shows a run's dashboard: `code` after the imports."""
    import nbformat

    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "workbench", "display_name": "workbench", "language": "python"}})
    nb.cells = [nbformat.v4.new_code_cell(f"from workbench.runs.view import RunView\nfrom workbench.widgets.dashboard import Dashboard\n{code}")]
    nbformat.write(nb, path)


def test_samples_tab_group_view_side_by_side_and_health_banner_in_jupyterlab(lab):
    """A finished run folder with kept samples and an entropy flag (tests/helpers/samples_folder.py),
    its dashboard in the same JupyterLab: the banner names the flag and its button opens the samples
    at its step; the verdict filter leaves only failures; the group view shows one prompt's
    completions with their advantages (a long one folded, opened by a click); the side by side
    shows two evaluations. Screenshots of each go to test-artifacts/ (copied into docs/)."""
    from playwright.sync_api import sync_playwright

    from tests.helpers.samples_folder import COLLAPSE, write_samples_run

    base, token, tmp = lab
    run = write_samples_run(tmp / "samples-run")
    viewer_notebook(tmp / "lab" / "viewer.ipynb", f"Dashboard(RunView.open({str(run)!r}))")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1400})
            # a workspace of its own, reset: the default one would restore the first test's quickstart
            # tab, which could be the current widget that Run All runs (seen after the quickstart test)
            run_all(page, f"{base}/lab/workspaces/viewer/tree/viewer.ipynb?reset&token={token}")
            page.add_style_tag(content=".Toastify { display: none !important; }")  # JupyterLab's news toast, out of the pictures
            dash = page.locator(".workbench-dashboard")
            banner = page.locator(".workbench-health")
            banner.wait_for(timeout=120_000)
            banner_text = banner.inner_text()
            banner.screenshot(path=str(ARTIFACTS / "dashboard-health.png"))
            banner.locator("button.wb-flag-open").click()  # "samples at step 40"
            samples = page.locator(".workbench-samples")
            page.wait_for_selector(f".workbench-samples tr.wb-sample[data-step='{COLLAPSE}']", timeout=30_000)
            all_rows = samples.locator("tr.wb-sample").count()
            samples.locator(".widget-dropdown", has_text="verdict").locator("select").select_option(label="failed")
            page.wait_for_function("() => document.querySelectorAll(\".workbench-samples tr.wb-sample[data-passed='true']\").length === 0"
                                   " && document.querySelectorAll('.workbench-samples tr.wb-sample').length > 0", timeout=30_000)
            failed_rows = samples.locator("tr.wb-sample").count()
            steps_shown = set(samples.locator("tr.wb-sample").evaluate_all("rs => rs.map(r => r.dataset.step)"))
            dash.screenshot(path=str(ARTIFACTS / "dashboard-samples.png"))
            samples.locator("button", has_text="Group view").click()
            group = page.locator(".workbench-samples .wb-group")
            group.wait_for(timeout=30_000)
            cards = group.locator(".wb-completion").count()
            folded_text = group.inner_text()
            dash.screenshot(path=str(ARTIFACTS / "dashboard-group.png"))
            group.locator("details.wb-fold summary").first.click()  # the long, truncated completion: opened whole
            page.wait_for_function("() => document.querySelector('.workbench-samples .wb-group details[open]')", timeout=10_000)
            group_text = group.inner_text()
            samples.locator("button", has_text="Side by side").click()
            page.wait_for_selector(".workbench-samples .wb-pair", timeout=30_000)
            pairs = samples.locator(".wb-pair").count()
            side_text = samples.locator(".wb-samples-out").inner_text()
            dash.screenshot(path=str(ARTIFACTS / "dashboard-side-by-side.png"))
            errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").all_inner_texts()
        finally:
            browser.close()
    assert "run health: 1 flag" in banner_text and f"entropy from step {COLLAPSE}" in banner_text
    assert "train/entropy" in banner_text and "entropy fell 94%" in banner_text
    assert all_rows == 16 and failed_rows == 5 and steps_shown == {str(COLLAPSE)}  # step 40: 3 train + 2 validation failures
    assert cards == 4 and "adv +1.50" in group_text and "adv -0.50" in group_text
    # folded: the middle behind the click, the end (the answer) in sight; opened: all of it
    assert "step 10: keep" not in folded_text and "ANSWER 41" in folded_text
    assert "step 10: keep" in group_text and "ANSWER 41" in group_text and "truncated" in group_text
    assert pairs == 4 and "step 0 → step 70: 4 prompts in both; 3 pass more often" in side_text
    assert not any("Traceback" in e for e in errors), errors
    for name in ("health", "samples", "group", "side-by-side"):
        assert (ARTIFACTS / f"dashboard-{name}.png").stat().st_size > 5_000


def test_an_environments_samples_show_as_conversations_in_jupyterlab(lab):
    """A tool environment's kept samples in the Samples tab's group view: each episode turn by turn, the
    model's tool calls, the tools' results and its final answer, labelled by who wrote them."""
    from playwright.sync_api import sync_playwright

    from tests.helpers.samples_folder import write_env_samples_run

    base, token, tmp = lab
    run = write_env_samples_run(tmp / "env-run")
    viewer_notebook(tmp / "lab" / "env-viewer.ipynb", f"d = Dashboard(RunView.open({str(run)!r}))\nd.open_samples(1, 'train')\nd")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1400})
            run_all(page, f"{base}/lab/workspaces/envviewer/tree/env-viewer.ipynb?reset&token={token}")
            samples = page.locator(".workbench-samples")
            page.wait_for_selector(".workbench-samples tr.wb-sample", timeout=120_000)
            table_text = samples.inner_text()
            samples.locator("button", has_text="Group view").click()
            group = page.locator(".workbench-samples .wb-group")
            group.wait_for(timeout=30_000)
            for d in group.locator("details.wb-fold summary").all():  # open every folded card
                d.click()
            group_text = group.inner_text()
            page.locator(".workbench-dashboard").screenshot(path=str(ARTIFACTS / "dashboard-conversation.png"))
        finally:
            browser.close()
    assert "── assistant ──" in table_text and "<raw episode text>" not in table_text
    for shown in ('"name": "add"', "── tool ──", "85", "Submitted 85.", "The answer is 85."):
        assert shown in group_text, shown
    assert group_text.count("── assistant ──") == 4  # three turns of the first episode, one of the second
