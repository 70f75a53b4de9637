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
