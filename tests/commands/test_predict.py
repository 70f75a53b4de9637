"""`workbench predict` (workbench.commands.predict): the JSON a user redraws the curve from, and bad input as one line."""

from __future__ import annotations

import json

from tests.runs.test_by_setting import AT, WIDTHS, law, write_csv
from workbench.cli import main


def test_csvs_in_the_json_carry_the_parameters_with_intervals(tmp_path, capsys):
    named = [write_csv(tmp_path / f"model.n_embd={w}.csv", w, i) for i, w in enumerate(WIDTHS)]
    assert main(["predict", *map(str, named), "--by", "model.n_embd", "--at", str(AT), "--target", "0.35", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for k in ("A", "B", "C_mid", "R0"):
        assert out[f"{k}_ci"][0] <= out[k] <= out[f"{k}_ci"][1]
    assert out["A_ci"][0] <= law(AT)["A"] <= out["A_ci"][1]
    assert out["reach"]["target"] == 0.35 and out["worth"]["worth"] in (True, False, None)
    assert main(["predict", *map(str, named), "--by", "model.n_embd", "--at", str(AT)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"predicted model.n_embd={AT}") and "A     =" in text


def test_bad_input_is_one_line(tmp_path, capsys):
    named = [write_csv(tmp_path / f"model.n_embd={w}.csv", w, i) for i, w in enumerate(WIDTHS)]
    assert main(["predict", *map(str, named[:2]), "--by", "model.n_embd", "--at", "256"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "runs at 2 value(s) of the setting given" in err and "3 or more values" in err
    bare = write_csv(tmp_path / "curve.csv", 32, 0)
    assert main(["predict", *map(str, named[1:]), str(bare), "--by", "model.n_embd", "--at", "256"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "cannot tell its model.n_embd" in err
    assert main(["predict", "--by", "model.n_embd", "--at", "256"]) == 2
    assert "no runs given" in capsys.readouterr().err
    assert main(["predict", *map(str, named), "--by", "model.n_embd", "--at", "256", "--where", "task.name"]) == 2
    assert "--where takes KEY=VALUE" in capsys.readouterr().err
