"""Run configs from YAML and overrides: errors say where the bad key came from."""

from __future__ import annotations

import pytest

from workbench.config import load_run_config, run_config_from_dict
from workbench.errors import UserError


def test_an_unknown_override_is_blamed_on_the_override_not_the_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("train:\n  lr: 0.0002\n")
    with pytest.raises(UserError) as e:
        load_run_config(path, ["train.lrr=1"])
    msg = str(e.value)
    assert "in the overrides" in msg and str(path) not in msg and "did you mean 'train.lr'" in msg


def test_an_unknown_key_in_the_file_names_the_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("train:\n  lrr: 0.0002\n")
    with pytest.raises(UserError, match=rf"{path}: unknown config key 'train.lrr' \(did you mean 'train.lr'\?\)"):
        load_run_config(path, ["seed=3"])


def test_overrides_leave_the_callers_mapping_untouched():
    data = {"train": {"lr": 2e-4}}
    cfg = run_config_from_dict(data, ["train.lr=0.001"])
    assert cfg.train.lr == 0.001 and data == {"train": {"lr": 2e-4}}


def test_every_config_field_has_a_one_line_meaning():
    """The config reference and `workbench config show` read each field's attribute docstring
    (workbench/config/__init__.py says so): a field added without one fails here."""
    from workbench.commands.config import config_keys

    keys = config_keys()
    assert {"train.lr", "eval.at_start", "checkpoint.keep", "train.weight_decay", "recipe.loss.eps_max",
            "task.mix[].weight"} <= {k.key for k in keys}
    missing = [k.key for k in keys if not k.meaning]
    assert not missing, f"config fields without a meaning (add a docstring line under each): {missing}"


def test_a_field_without_a_docstring_has_no_meaning():
    from dataclasses import dataclass

    from workbench.commands.config import config_keys

    @dataclass
    class Section:
        documented: int = 1
        """What it does."""
        bare: int = 2  # a comment is not a meaning

    assert {k.key: k.meaning for k in config_keys(Section)} == {"documented": "What it does.", "bare": ""}


def test_config_show_prints_the_resolved_config_with_meanings(capsys):
    from workbench.cli import main

    assert main(["config", "show", "--config", "configs/quickstart.yaml", "--set", "train.lr=3e-4", "train"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "train.lr = 0.0003  # AdamW's peak learning rate, reached after warmup_steps." in lines
    assert all(line.startswith("train.") and "  # " in line for line in lines)
    assert main(["config", "show"]) == 0
    out = capsys.readouterr().out
    assert 'model.path = "builtin:tiny"' in out and "recipe.loss.type = \"cispo\"" in out and "tracking.mlflow = true" in out
    assert main(["config", "show", "--set", "train.lrr=1"]) == 2
    assert "did you mean 'train.lr'" in capsys.readouterr().err


def test_workbench_run_requires_config():
    """The chosen behaviour: `workbench run` needs --config (configs/quickstart.yaml says so too)."""
    import contextlib
    import io
    from pathlib import Path

    from workbench.cli import build_parser

    err = io.StringIO()
    with pytest.raises(SystemExit), contextlib.redirect_stderr(err):
        build_parser().parse_args(["run"])
    assert "the following arguments are required: --config" in err.getvalue()
    comment = Path(__file__).resolve().parents[1].joinpath("configs", "quickstart.yaml").read_text()
    assert "without --config" not in comment and "--config is required" in comment


def test_every_subcommand_help_has_a_description_and_an_example():
    from workbench.cli import build_parser

    parser = build_parser()
    subs = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices
    assert len(subs) >= 11
    for name, sub in subs.items():
        assert sub.description, f"workbench {name} --help has no description"
        assert f"workbench {name} " in (sub.epilog or "") and "example" in sub.epilog, f"workbench {name} --help has no example"
    assert "--x units" in subs["fit"].format_help()  # --until takes compute in the x column's units


def test_lazy_names_tab_complete():
    import workbench

    assert {"Session", "RunView", "__version__"} <= set(dir(workbench))


def test_wrong_keys_in_the_recipe_and_elsewhere_are_named_together():
    with pytest.raises(UserError) as e:
        run_config_from_dict({"recipe": {"loss": {"epsmax": 1}}, "train": {"lrr": 1}})
    msg = str(e.value)
    assert msg.startswith("2 problems in the config: (1) unknown config key 'recipe.loss.epsmax' (did you mean 'recipe.loss.eps_max'?)")
    assert "(2) unknown config key 'train.lrr' (did you mean 'train.lr'?)" in msg


def test_evaluation_is_off_at_zero_and_a_negative_interval_is_refused_in_one_line():
    from workbench.config import run_config_from_dict
    from workbench.configtools import ConfigError

    assert not run_config_from_dict({}, {"eval.every_steps": 0}).eval.enabled
    assert run_config_from_dict({}, {"eval.every_steps": 3}).eval.enabled
    with pytest.raises(ConfigError, match=r"eval.every_steps: -1 is negative.*0 for no evaluation"):
        run_config_from_dict({}, {"eval.every_steps": -1})
