"""`workbench predict` (workbench.commands.predict): the JSON a user redraws the curve from, the
one-seed warning on the shipped depth ladder, and bad input as one line."""

from __future__ import annotations

import json
from pathlib import Path

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


DEPTH = Path(__file__).resolve().parents[2] / "examples" / "predict" / "ladder-depth"


def test_the_one_seed_depth_ladder_is_told_to_run_more_seeds(capsys):
    """The shipped depth ladder at seed 0 alone (its one-seed history: docs/measured.md) warns; its 3 seeds do not."""
    one = [str(DEPTH / f"model.n_layer={n}_seed=0.csv") for n in (1, 2, 3)]
    assert main(["predict", *one, "--by", "model.n_layer", "--at", "4"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "one seed" in line]
    assert len(lines) == 1 and lines[0].startswith("  warning: each rung (value of model.n_layer) has one seed: ")
    assert "--ladder model.n_layer --seeds 3" in lines[0]
    assert main(["predict", *one, "--by", "model.n_layer", "--at", "4", "--json"]) == 0
    assert any("has one seed" in w for w in json.loads(capsys.readouterr().out)["warnings"])
    three = [str(DEPTH / f"model.n_layer={n}_seed={s}.csv") for n in (1, 2, 3) for s in (0, 1, 2)]
    assert main(["predict", *three, "--by", "model.n_layer", "--at", "4"]) == 0
    assert "one seed" not in capsys.readouterr().out
