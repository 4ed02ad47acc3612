import dataclasses

import pytest

from dlrm_multiepoch.train.config import _SECTIONS, TrainConfig, _leaf_fields, build_parser, config_fields, parse_config


def test_defaults_and_overrides_land_in_their_sections():
    cfg = parse_config(["--epochs", "2", "--embedding_dim", "8", "--dense_arch_layer_sizes", "32,8", "--learning_rate", "0.01"])
    assert isinstance(cfg, TrainConfig)
    assert cfg.epochs == 2 and cfg.model.embedding_dim == 8 and cfg.optim.learning_rate == 0.01
    assert cfg.data.dataset == "bookcrossing"
    assert parse_config([]).to_dict() == TrainConfig().to_dict()


def test_every_flag_has_help():
    for action in build_parser()._actions:
        if action.dest != "help":
            assert action.help, f"--{action.dest} has no help text"


def test_flag_names_are_unique_across_sections():
    # Count the leaf fields themselves: config_fields() keys by name, so repeats would hide there.
    names = [f.name for cls in (TrainConfig, *_SECTIONS.values()) for f in _leaf_fields(cls)]
    assert sorted(names) == sorted(config_fields())
    dests = [a.dest for a in build_parser()._actions if a.dest != "help"]
    assert sorted(dests) == sorted(names)


def test_a_field_repeated_in_two_sections_is_refused(monkeypatch):
    @dataclasses.dataclass
    class Clash:
        epochs: int = 1  # also a TrainConfig field

    monkeypatch.setitem(_SECTIONS, "clash", Clash)
    with pytest.raises(TypeError, match="--epochs is a field of both TrainConfig and Clash"):
        config_fields()


def test_unknown_flag_is_rejected_by_name(capsys):
    with pytest.raises(SystemExit) as e:
        parse_config(["--epoch", "3"])
    assert e.value.code == 2
    assert "unrecognized arguments: --epoch" in capsys.readouterr().err


def test_bad_value_names_the_flag(capsys):
    with pytest.raises(SystemExit):
        parse_config(["--batch_size", "0"])
    assert "--batch_size must be a positive integer, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_config(["--epochs", "two"])
    assert "--epochs" in capsys.readouterr().err


def test_model_and_pipeline_choices(capsys):
    cfg = parse_config(["--model", "multipath", "--history_length", "5", "--pipeline", "semi_sync"])
    assert cfg.model.model == "multipath" and cfg.pipeline == "semi_sync"
    with pytest.raises(SystemExit):
        parse_config(["--model", "multipath"])
    assert "--model multipath needs --history_length > 0" in capsys.readouterr().err


def test_bad_pipeline_and_schedule_name_the_flag(capsys):
    with pytest.raises(SystemExit):
        parse_config(["--pipeline", "async"])
    assert "--pipeline must be one of sparse_dist, semi_sync, torchrec_semi_sync" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_config(["--freeze_schedule", "tables=frozen@[2,1)"])
    assert "--freeze_schedule: group 'tables'" in capsys.readouterr().err


def test_boolean_flags_take_no_prefix():
    assert parse_config(["--no-progress_bar"]).progress_bar is False


def test_auto_schedule_flags_and_their_errors(capsys):
    cfg = parse_config(["--freeze_schedule", "auto", "--val_fraction", "0.1", "--auto_patience", "5"])
    assert cfg.auto.auto_patience == 5 and cfg.data.val_fraction == 0.1
    for argv, message in [
        (["--freeze_schedule", "auto"], "--freeze_schedule auto decides from a validation split: set --val_fraction"),
        (["--freeze_schedule", "auto; gate:feature_cross=closed", "--val_fraction", "0.1"], "'auto' stands alone"),
        (["--freeze_schedule", "auto", "--val_fraction", "0.1", "--auto_metric", "acc"], "--auto_metric must be one of"),
        (["--val_fraction", "1"], "--val_fraction must be in [0, 1), got 1.0"),
    ]:
        with pytest.raises(SystemExit):
            parse_config(argv)
        assert message in capsys.readouterr().err, argv
