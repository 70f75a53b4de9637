"""The shipped leave-one-out study (examples/loo: 36 runs' curves, and what stop-early did on the
same grid) rebuilds the findings table and early-decision figures that docs/howto/findings.md
shows, exactly: the manual's numbers come from the curves in git, not from a database that is not."""

from __future__ import annotations

from pathlib import Path

from workbench.cli import main

ROOT = Path(__file__).resolve().parents[2]
LEFT_OUT = ("scalerl-loo-length-penalty=addition answers are 2-3 characters: "
            "no thinking phase for a length penalty or forced interruption to act on")


def _shipped() -> str:
    page = (ROOT / "docs" / "howto" / "findings.md").read_text()
    block = page.split("<!-- findings:begin -->", 1)[1].split("<!-- findings:end -->", 1)[0]
    return block.strip("\n").removeprefix("```text\n").removesuffix("\n```").strip("\n")


def test_the_shipped_study_rebuilds_the_table_in_the_manual(tmp_path, capsys):
    out = tmp_path / "findings.md"
    assert main(["findings", "--curves", str(ROOT / "examples" / "loo"), "--left-out", LEFT_OUT, "--markdown-out", str(out)]) == 0
    capsys.readouterr()
    rebuilt = out.read_text().strip("\n")
    assert rebuilt.startswith("study: scalerl x3, ") and rebuilt.count(" x3") == 12  # 12 recipes, 3 seeds each
    assert "stop-early on the same grid saved" in rebuilt  # examples/loo/stop_early.json was read
    assert rebuilt == _shipped()
