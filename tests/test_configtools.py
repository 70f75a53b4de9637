"""Reading config YAML: a broken file is one line that names the file and where it breaks; a
config tree with several wrong keys or values names them all in one error."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

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


@dataclass
class Item:
    weight: float = 1.0


@dataclass
class Inner:
    lr: float = 0.1
    items: list[Item] = field(default_factory=list)
    extra: Optional[Item] = None


@dataclass
class Outer:
    seed: int = 0
    inner: Inner = field(default_factory=Inner)


def test_from_dict_names_every_problem_of_the_tree_at_once():
    """Unknown keys and wrong values, in this section, the sections under it and a list's items: one
    error, one line, each problem in `.problems`; a single problem is its own message, as before."""
    from workbench.configtools import ConfigError, from_dict

    with pytest.raises(ConfigError) as e:
        from_dict(Outer, {"seeed": 1, "inner": {"lr": "fast", "items": [{"wieght": 2}, {"weight": 1}, {"w": 3}],
                                                "extra": {"weigh": 1}}})
    assert e.value.problems == [
        "unknown config key 'seeed' (did you mean 'seed'?); valid keys here: ['inner', 'seed']",
        "inner.lr: expected a number, got 'fast'",
        "unknown config key 'inner.items[0].wieght' (did you mean 'weight'?); valid keys here: ['weight']",
        "unknown config key 'inner.items[2].w'; valid keys here: ['weight']",
        "unknown config key 'inner.extra.weigh' (did you mean 'inner.extra.weight'?); valid keys here: ['weight']",
    ]
    assert str(e.value).startswith("5 problems in the config: (1) unknown config key 'seeed'") and "\n" not in str(e.value)
    with pytest.raises(ConfigError) as one:
        from_dict(Outer, {"inner": {"lrr": 1}})
    assert str(one.value) == "unknown config key 'inner.lrr' (did you mean 'inner.lr'?); valid keys here: ['extra', 'items', 'lr']"
