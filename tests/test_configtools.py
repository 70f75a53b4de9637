"""Reading config YAML: a broken file is one line that names the file and where it breaks."""

from __future__ import annotations

import pytest

from workbench.configtools import load_yaml
from workbench.errors import UserError


def test_broken_yaml_is_one_line_with_file_line_and_column(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("train:\n  lr: [1, 2\nseed: 3\n")
    with pytest.raises(UserError) as e:
        load_yaml(path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and "not valid YAML at line 3, column 5" in msg


def test_missing_file_and_non_mapping(tmp_path):
    with pytest.raises(UserError, match="config file not found"):
        load_yaml(tmp_path / "nope.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(UserError, match="expected a mapping at the top level, got list"):
        load_yaml(tmp_path / "list.yaml")
    (tmp_path / "empty.yaml").write_text("")
    assert load_yaml(tmp_path / "empty.yaml") == {}
