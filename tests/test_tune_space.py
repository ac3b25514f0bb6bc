"""The search-space file: distributions and grids, numbers YAML leaves as strings, and the checks against a real
config (keys in any command-line form, types, values the parser or its value checks refuse)."""

from __future__ import annotations

import pytest

from seqrec.build import parse
from seqrec.tune_space import Param, check_space, cli_value, read_space, space_from_dict

BASE = ["--config", "sasrec_ml100k"]


@pytest.fixture(scope="module")
def config():
    return parse(BASE)


def test_distributions_and_numbers_yaml_leaves_as_strings(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text("model.lr: {float: [1e-4, 1e-2], log: true}\n"
                    "data.batch_size: {int: [64, 256], step: 64}\n"
                    "model.net.dropout: {categorical: [0.1, 2e-1, 0.3]}\n")
    space = read_space(path)
    assert space.params == (
        Param("model.lr", "float", 1e-4, 1e-2, log=True),
        Param("data.batch_size", "int", 64, 256, step=64),
        Param("model.net.dropout", "categorical", choices=(0.1, 0.2, 0.3)),
    )
    assert not space.grid and space.size is None
    assert space_from_dict(space.as_dict()) == space  # what a study stores reads back the same


def test_a_grid_is_every_combination():
    space = space_from_dict({"grid": {"model.net.dropout": [0.2, 0.5], "model.weight_decay": [0, "1e-3"]}})
    assert space.grid and space.size == 4
    assert space.grid_values() == {"model.net.dropout": [0.2, 0.5], "model.weight_decay": [0, 0.001]}


@pytest.mark.parametrize(("document", "expected"), [
    ({"model.lr": [0.1, 0.2]}, "expected a distribution"),
    ({"model.lr": {"float": [0.1, 0.2], "int": [1, 2]}}, "exactly one of float, int, categorical"),
    ({"model.lr": {"float": [0.2, 0.1]}}, "low > high"),
    ({"model.lr": {"float": [0.0, 0.1], "log": True}}, "needs low > 0"),
    ({"data.batch_size": {"int": [16, 64.5]}}, "must be integers"),
    ({"model.betas": {"categorical": [[0.9, 0.98]]}}, "choices must be numbers, strings, booleans or null"),
    ({"model.lr": {"categorical": [0.1, 0.1]}}, "repeat a value"),
    ({"grid": {"model.lr": 0.1}}, "must list its values"),
    ({}, "expected a mapping"),
])
def test_malformed_spaces_are_one_line(document, expected):
    with pytest.raises(ValueError, match="space.yaml: .*" + expected.replace("(", r"\(").replace("[", r"\[")):
        space_from_dict(document, "space.yaml")


def test_keys_in_any_command_line_form_are_accepted(config):
    space = space_from_dict({"model.init_args.lr": {"float": [1e-4, 1e-2], "log": True},
                             "model.net.init_args.dropout": {"categorical": [0.1, 0.3]},
                             "data.batch_size": {"int": [16, 64]},
                             "model.mask_history": {"categorical": [True, False]}})
    check_space(space, config, parse, BASE, "s.yaml")


@pytest.mark.parametrize(("document", "expected"), [
    ({"model.net.dropot": {"float": [0.1, 0.3]}}, "unknown key 'model.net.dropot'.*did you mean model.net.dropout"),
    ({"model.net.d_model": {"float": [16, 64]}}, "does not fit the key's type: int"),
    ({"model.lr": {"categorical": ["fast", 0.1]}}, "does not fit the key's type: float"),
    ({"model.mask_history": {"int": [0, 1]}}, "does not fit the key's type: bool"),
    ({"model.net.dropout": {"float": [0.1, 1.0]}}, "the value 1.0 is refused .*must be a fraction in"),
    ({"model.optimizer": {"categorical": ["adam", "sgdx"]}}, "the value 'sgdx' is refused .*optimizer: Expected"),
])
def test_a_space_that_does_not_fit_the_config_is_refused(config, document, expected):
    with pytest.raises(ValueError, match="s.yaml: .*" + expected):
        check_space(space_from_dict(document), config, parse, BASE, "s.yaml")


def test_flag_values():
    assert [cli_value(v) for v in (None, True, 0.001, 64, "adamw")] == ["null", "true", "0.001", "64", "adamw"]
