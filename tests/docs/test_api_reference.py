"""The generated reference pages are whole: the Python API page has an entry for every name in
`workbench.__all__` and `workbench.scaling.__all__`, headed by its import path, with its signature
(constructor parameters, return type); `<placeholder>`s in docstrings show as text; the TRL and verl
page lists every row of workbench/config_aliases.py. Reads the manual built once per test session."""

from __future__ import annotations

import html
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

import workbench
import workbench.scaling as scaling
from workbench.config import RunConfig, load_run_config
from workbench.config_aliases import ALIASES, METRIC_ALIASES

HEADING = re.compile(r'<h3 id="([^"]+)" class="doc doc-heading">(.*?)</h3>', re.S)
PLACEHOLDER = re.compile(r"<([a-z_]+)>")


def text(fragment: str) -> str:
    """Visible text: tags dropped, entities decoded, whitespace collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def public() -> dict[str, Any]:
    """Import path -> object, for every name the API page must document."""
    names = {f"workbench.{n}": getattr(workbench, n) for n in workbench.__all__}
    names |= {f"workbench.scaling.{n}": getattr(scaling, n) for n in scaling.__all__}
    return names | {"workbench.config.load_run_config": load_run_config, "workbench.config.RunConfig": RunConfig}


@pytest.fixture(scope="module")
def api(built_site: Path) -> str:
    return (built_site / "reference" / "api.html").read_text()


def entries(page: str) -> dict[str, tuple[str, str]]:
    """Root entry id -> (heading text, the entry's HTML up to the next root entry or section)."""
    found = list(HEADING.finditer(page))
    out = {}
    for i, m in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(page)
        body = page[m.end():end].split("<h2 ", 1)[0]
        out[m.group(1)] = (text(m.group(2)), body)
    return out


def signature_text(body: str) -> str:
    m = re.search(r'<div class="doc-signature highlight">(.*?)</div>', body, re.S)
    assert m, "no signature"
    return text(m.group(1)).replace(" ", "")


def test_every_public_name_has_its_own_entry_headed_by_its_import_path(api):
    got = entries(api)
    assert set(got) == set(public()), "root entries are exactly the public names, under their import paths"
    assert len(scaling.__all__) >= 29
    for path, (heading, _) in got.items():
        assert heading.split()[0] == path, (path, heading)  # then an optional label: dataclass, ...


def test_every_entry_shows_its_signature_with_constructor_parameters_and_return_type(api):
    got = entries(api)
    for path, obj in public().items():
        sig = signature_text(got[path][1])
        name = path.rsplit(".", 1)[1]
        if not callable(obj):  # a constant: NAME = value
            assert sig.startswith(f"{name}="), (path, sig)
            continue
        assert sig.startswith(f"{name}("), (path, sig)
        params = inspect.signature(obj).parameters  # a class: its constructor's, self left out
        for p in params:
            assert p in sig, f"{path}: parameter {p} missing from {sig}"
        if inspect.isfunction(obj) and inspect.signature(obj).return_annotation is not inspect.Signature.empty:
            assert "->" in sig, f"{path}: no return type in {sig}"
    session = signature_text(got["workbench.Session"][1])
    assert "config:str|Path|None=None" in session and "overrides:" in session  # the constructor, not hidden


def _documented_docstrings(obj: Any) -> list[str]:
    """The docstrings the page renders for `obj`: its own, its constructor's, its public members'."""
    docs = [inspect.getdoc(obj) or ""]
    if inspect.isclass(obj):
        docs += [inspect.getdoc(v) or "" for k, v in vars(obj).items()
                 if (not k.startswith("_") or k == "__init__") and (inspect.isfunction(v) or isinstance(v, property))]
    return docs


def test_placeholders_in_docstrings_show_as_text(api):
    shown = text(api)
    wanted = {f"<{w}>" for obj in public().values() for doc in _documented_docstrings(obj)
              for w in PLACEHOLDER.findall(doc) if w not in ("br", "p")}
    assert wanted, "no <placeholder> in the documented docstrings: this test would check nothing"
    for p in sorted(wanted):
        assert p in shown, f"{p} is not on the API page (eaten as an HTML tag?)"


def test_the_trl_verl_page_lists_every_name_and_its_key(built_site):
    page = text((built_site / "reference" / "trl-verl.html").read_text())
    for a in ALIASES:
        assert f"{a.theirs} {a.ours or 'none'}" in page, (a.tool, a.theirs)
        if a.note:
            assert " ".join(a.note.split()) in page, a.theirs
    for m in METRIC_ALIASES:  # the metrics section: <name> and <domain> shown as text, not eaten as tags
        assert f"{m.theirs} {m.ours or 'none'}" in page, (m.tool, m.theirs)
    assert "did you mean train.lr (TRL's learning_rate)?" in page
