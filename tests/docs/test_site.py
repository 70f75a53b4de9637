"""The manual builds in strict mode (a broken link, a missing page or a failing reference page
fails), its generated reference pages are complete, and the built site opens in headless
Chromium with its headings and its search box."""

from __future__ import annotations

import functools
import html
import http.server
import re
import threading
from pathlib import Path

import pytest

from tests.docs.conftest import REPO, build_site
from workbench.cli import COMMANDS
from workbench.commands.config import config_keys

CHROMIUM = "/usr/bin/chromium"


def test_the_reference_pages_are_built(built_site):
    for page in ("index.html", "reference/config.html", "reference/cli.html", "reference/api.html", "metrics.html",
                 "measured.html", "reading-output.html", "concepts/sandbox.html", "concepts/forecast.html"):
        assert (built_site / page).is_file(), page
    assert (built_site / "search" / "search_index.json").is_file()  # the built-in, offline search
    assert not (built_site / "_incoming").exists() and not (built_site / "_hooks").exists()


def page_text(path: Path) -> str:
    """The page's visible text: tags dropped, entities decoded, whitespace collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", path.read_text())).split())


def test_the_config_reference_lists_every_key_with_type_default_and_meaning(built_site):
    text = page_text(built_site / "reference" / "config.html")
    for k in config_keys():
        if not k.section:
            assert f" {k.key} " in text, k.key
            shown = " ".join(k.meaning.replace("`", "").split())
            assert k.meaning and shown in text, k.key  # e.g. runs/<name> shown, not eaten as a tag
    assert "train.lr float 5e-07 AdamW's peak learning rate" in text


def test_the_cli_reference_lists_every_subcommand(built_site):
    html = (built_site / "reference" / "cli.html").read_text()
    for name in COMMANDS:
        assert re.search(rf'<h2 id="workbench-{name}">', html), name
    assert "workbench config show" in html and "usage: workbench run" in html


def test_the_api_page_renders_the_session_and_the_fit(built_site):
    html = (built_site / "reference" / "api.html").read_text()
    for name in ("Session", "RunView", "fit_sigmoid", "SigmoidFit", "load_run_config"):
        assert f'id="workbench.' in html and name in html, name


def test_a_broken_link_fails_the_strict_build(tmp_path):
    """What `make test` relies on: strict mode turns a dangling link into a failed build."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\n[gone](nowhere.md)\n")
    (tmp_path / "mkdocs.yml").write_text("site_name: t\nstrict: true\n")
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "s")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "nowhere.md" in proc.stderr
    assert callable(build_site)


@pytest.fixture
def served(built_site):
    """The built site over HTTP on 127.0.0.1 (the search index loads by fetch, as when published)."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(built_site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.browser
def test_the_site_opens_in_headless_chromium_with_headings_and_search(served):
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make browser` installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=args)
        try:
            page = browser.new_page()
            requests = []
            page.on("request", lambda r: requests.append(r.url))
            page.goto(f"{served}/index.html")
            assert page.locator("article h1").first.inner_text().rstrip("¶") == "workbench"
            assert page.locator("input.md-search__input").count() == 1
            page.goto(f"{served}/reference/config.html")
            assert page.locator("article h1").first.inner_text().rstrip("¶") == "Configuration reference"
            assert page.locator("article h2", has_text="train").count() >= 1
            # the search box answers from the built-in, offline index
            search = page.locator("input.md-search__input")
            search.click()
            search.type("sandbox", delay=30)
            page.wait_for_selector(".md-search-result__item", timeout=20_000)
            assert page.locator(".md-search-result__item").count() >= 1
            outside = [u for u in requests if not u.startswith(served) and not u.startswith("data:")]
            assert not outside, f"the site fetched from outside: {outside[:3]}"  # offline: no web fonts, no CDN
        finally:
            browser.close()
