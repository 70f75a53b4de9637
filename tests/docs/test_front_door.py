"""The front door: a README a newcomer reads in five minutes, release hygiene, and the
contradictions issue 38 found, each pinned."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def test_readme_is_at_most_200_lines():
    assert len(README.splitlines()) <= 200, len(README.splitlines())


def test_readme_has_a_route_for_each_goal_into_the_manual():
    routes = {"demo": "docs/getting-started.md", "own model": "docs/howto/own-model.md", "GPU": "docs/howto/gpu.md",
              "forecast": "docs/howto/forecast-curve.md", "compare": "docs/howto/compare.md", "sweep": "docs/howto/sweep.md"}
    for goal, page in routes.items():
        assert f"]({page})" in README, goal
        assert (REPO / page).is_file(), page
    for link in re.findall(r"\]\(((?:docs|env)/[^)#]+|[A-Z]+[\w.]*)\)", README):
        assert (REPO / link).exists(), f"README links to a missing file: {link}"


def test_readme_has_status_licence_and_citation():
    status = README.split("## Status", 1)[1].split("\n## ", 1)[0]
    assert "| where | what ran | versions |" in status and "CPU" in status and "H200" in status
    assert "not yet on a GPU" in status
    assert "Apache-2.0" in README and "](LICENSE)" in README and "](CITATION.cff)" in README


def test_release_hygiene_files():
    licence = (REPO / "LICENSE").read_text()
    assert licence.lstrip().startswith("Apache License") and "Version 2.0, January 2004" in licence
    assert "END OF TERMS AND CONDITIONS" in licence and len(licence.splitlines()) > 150  # the full text
    assert 'license = { text = "Apache-2.0" }' in (REPO / "pyproject.toml").read_text()
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["license"] == "Apache-2.0"
    import workbench

    assert cff["version"] == workbench.__version__
    assert any("2510.13786" in str(ref) for ref in cff["references"])  # the paper it implements
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert f"## {workbench.__version__}" in changelog and "## Version tags" in changelog and "v0.1.0" in changelog


def test_compare_without_a_store_says_what_makes_one(tmp_path, monkeypatch, capsys):
    from workbench.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "pyproject.toml").write_text("[project]\nname='p'\n")
    assert main(["compare", "--experiment", "e"]) == 2
    err = capsys.readouterr().err
    assert "`workbench run` (tracking.mlflow=true, the default)" in err and "MLFLOW_TRACKING_URI" in err


def test_env_readme_agrees_with_the_status_table():
    env = (REPO / "env" / "README.md").read_text()
    assert "have not run on a GPU yet" not in env and "on one H100" not in env
    assert "H200" in env and "2026-11-26" in env


def test_make_setup_installs_the_pinned_docs_extra_and_make_docs_builds_strict():
    import tomllib

    docs = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["docs"]
    assert {r.split("==")[0] for r in docs} >= {"mkdocs", "mkdocs-material", "mkdocstrings", "mkdocstrings-python"}
    assert all("==" in r for r in docs)  # pinned: the same site offline everywhere
    makefile = (REPO / "Makefile").read_text()
    setup = re.search(r"^\$\(STAMP\):.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
    assert '".[docs]"' in setup
    assert re.search(r"^docs: setup\n\t.*mkdocs build --strict", makefile, re.M)
    mkdocs = (REPO / "mkdocs.yml").read_text()
    assert "font: false" in mkdocs and "_incoming/" in mkdocs  # no web fonts; the merge inbox is not built
