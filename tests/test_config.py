import dataclasses
import json
from pathlib import Path

import pytest

from dlrm_multiepoch.config_section import flag_fields, flag_name, option, validated
from dlrm_multiepoch.data.cache import cache_key
from dlrm_multiepoch.data.config import DataConfig
from dlrm_multiepoch.models.config import ModelConfig
from dlrm_multiepoch.optim.options import ReinitSchedule, TableLRSchedule
from dlrm_multiepoch.run_files import flat_config
from dlrm_multiepoch.schedule import FreezeSchedule
from dlrm_multiepoch.table_values import TableValues
from dlrm_multiepoch.train.config import _SECTIONS, TrainConfig, _top_fields, build_parser, config_fields, parse_config
from dlrm_multiepoch.train.sections import PipelineConfig

# A run record (TrainConfig.to_dict()) written by main at 1b46590, before the config had sections,
# from a flag in every section: old run folders resume and branch only if records keep this shape.
RECORD_BEFORE_SECTIONS = Path(__file__).parent / "fixtures" / "train_config_record_1b46590.json"


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
    names = [f.name for f in _top_fields()] + [flag_name(f) for cls in _SECTIONS.values() for f in flag_fields(cls)]
    assert len(names) == len(set(names)) == len(config_fields())
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


def test_a_flag_renamed_onto_another_is_refused(monkeypatch):
    @dataclasses.dataclass
    class Clash:
        kind: str = option("x", flags=("--pipeline",))  # the pipeline section's --pipeline

    monkeypatch.setitem(_SECTIONS, "clash", Clash)
    with pytest.raises(TypeError, match="--pipeline is a field of both PipelineConfig and Clash"):
        config_fields()


def test_run_records_keep_their_shape_from_before_the_sections():
    before = json.loads(RECORD_BEFORE_SECTIONS.read_text())
    cfg = parse_config(before["argv"])
    record, old = flat_config(json.loads(json.dumps(cfg.to_dict()))), flat_config(before["record"])
    assert {path: record.get(path) for path in old} == old  # every recorded value, where it was
    # Flags added since (their paths: tests/fixtures/options.txt), at their defaults.
    defaults = flat_config(json.loads(json.dumps(TrainConfig().to_dict())))
    assert {path: record[path] for path in set(record) - set(old)} == {path: defaults[path] for path in set(record) - set(old)}
    assert TrainConfig.from_flags(**cfg.flags()).to_dict() == cfg.to_dict()  # the flat view round-trips


def test_flags_land_in_their_sections():
    cfg = parse_config(["--batch_size", "256", "--pipeline", "semi_sync", "--no-checkpoint", "--run_name", "r"])
    assert (cfg.loader.batch_size, cfg.pipeline.name, cfg.checkpoint.enabled, cfg.metrics.run_name) == (256, "semi_sync", False, "r")
    assert {f.path for f in config_fields().values() if f.name in ("pipeline", "checkpoint")} == {"pipeline.name", "checkpoint.enabled"}
    assert cfg.with_flags(batch_size=512).loader.batch_size == 512 and cfg.loader.batch_size == 256
    with pytest.raises(TypeError, match=r"\['batch'\] are not flags"):
        TrainConfig.from_flags(batch=3)


def test_validation_parses_each_text_flag_once_into_its_typed_value():
    argv = ["--epochs", "3", "--freeze_schedule", "delayed", "--sharding_types", "table_wise,row_wise", "--id_dropout",
            "0.02,t_user=0", "--table_lr", "t_item=0.5", "--table_lr_warmup", "10%", "--table_lr_decay", "cosine",
            "--falr", "power", "--falr_ref", "100", "--falr_tables", "t_user", "--reinit", "table:t_user@1,2"]  # fmt: skip
    cfg = parse_config(argv)
    assert cfg.freeze.schedule == FreezeSchedule.parse("delayed") and not cfg.freeze.is_auto
    assert cfg.pipeline.sharding_type_list == ("table_wise", "row_wise")
    assert (cfg.remedies.id_dropout_values.get("t_user"), cfg.remedies.id_dropout_values.get("t_item")) == (0.0, 0.02)
    assert (cfg.optim.table_lr_values.get("t_item"), cfg.optim.table_lr_values.get("t_user")) == (0.5, 0.05)
    assert cfg.optim.lr_schedule == TableLRSchedule.parse("10%", "cosine", 0.0)
    assert (cfg.optim.falr_config.kind, cfg.optim.falr_config.ref, cfg.optim.falr_table_list) == ("power", 100, ("t_user",))
    assert cfg.optim.reinit_schedule == ReinitSchedule((("table:t_user", (1, 2)),))
    # Parsed values are not flags: records hold the text as given, and equal configs compare equal.
    assert cfg.to_dict()["freeze_schedule"] == "delayed" and "schedule" not in cfg.to_dict()
    assert cfg == parse_config(argv) and parse_config([]).optim.falr_config is None
    auto = parse_config(["--freeze_schedule", "auto", "--val_fraction", "0.1"])
    assert auto.freeze.is_auto and auto.freeze.schedule is None
    pipeline = PipelineConfig(sharding_types="row_wise,nope")
    with pytest.raises(ValueError, match="--sharding_types 'row_wise,nope': expected a comma-separated subset of"):
        pipeline.validate()


def test_data_and_model_sections_parse_their_text_flags_once():
    argv = ["--dataset", "interactions", "--min_count", "2,t_user=3", "--task_thresholds", "like:4,love:5",
            "--categorical_cols", "shop,city", "--dense_cols", "price", "--multi_hot_cols", "tags",
            "--dense_arch_layer_sizes", "32,16", "--sequence_head_layer_sizes", "8,4", "--task_loss_weights", "1,0.5"]  # fmt: skip
    cfg = parse_config(argv)
    data, model = cfg.data, cfg.model
    assert data.min_count_values == TableValues("--min_count", 2, {"t_user": 3})
    assert data.task_threshold_values == {"like": 4.0, "love": 5.0}
    assert (data.categorical_col_list, data.dense_col_list, data.multi_hot_col_list) == (("shop", "city"), ("price",), ("tags",))
    assert (model.dense_arch_sizes, model.over_arch_sizes, model.sequence_head_sizes) == ((32, 16), (64, 32), (8, 4))
    assert model.task_loss_weight_values == (1.0, 0.5) and parse_config([]).model.task_loss_weight_values == ()
    # Parsed values are not flags: records hold the text as given, and the data cache keys are
    # those main computed at 1b8cdc0, before these sections parsed anything (no user's cache is rebuilt).
    assert cfg.to_dict()["data"]["min_count"] == "2,t_user=3" and "min_count_values" not in cfg.to_dict()["data"]
    assert "dense_arch_sizes" not in cfg.to_dict()["model"]
    assert cache_key(data.cache_options()) == "c43033df128d9c2634b8"
    assert cache_key(DataConfig().cache_options()) == "7884a72280a03a91d5ed"
    # A section nobody validated (built directly, or copied by dataclasses.replace) is parsed (the model
    # builders) or validated (the data side) on first use; one whose values are parsed is not parsed again.
    copy = dataclasses.replace(model, over_arch_layer_sizes="8")
    assert copy.over_arch_sizes is None and validated(copy, parse_only=True).over_arch_sizes == (8,)
    copy.over_arch_sizes = (4,)
    assert validated(copy, parse_only=True).over_arch_sizes == (4,)
    with pytest.raises(ValueError, match="--task_loss_weights expects finite non-negative numbers, got '1,-1'"):
        validated(ModelConfig(task_loss_weights="1,-1"), parse_only=True)
    with pytest.raises(ValueError, match=r"--dense_arch_layer_sizes must end with --embedding_dim \(8\), got '16'"):
        validated(ModelConfig(embedding_dim=8, dense_arch_layer_sizes="16"))
    with pytest.raises(ValueError, match="--dense_cols names a column twice: 'a,a'"):
        validated(DataConfig(dense_cols="a,a"))


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
    assert cfg.model.model == "multipath" and cfg.pipeline.name == "semi_sync"
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
    assert parse_config(["--no-progress_bar"]).metrics.progress_bar is False


def test_auto_schedule_flags_and_their_errors(capsys):
    cfg = parse_config(["--freeze_schedule", "auto", "--val_fraction", "0.1", "--auto_patience", "5"])
    assert cfg.auto.auto_patience == 5 and cfg.data.val_fraction == 0.1
    for argv, message in [
        (["--freeze_schedule", "auto"], "--freeze_schedule auto decides from a validation split: set --val_fraction"),
        (["--freeze_schedule", "auto; gate:feature_cross=closed", "--val_fraction", "0.1"], "'auto' stands alone"),
        (["--freeze_schedule", "auto", "--val_fraction", "0.1", "--auto_metric", "acc"], "--auto_metric must be one of"),
        (["--val_fraction", "1"], "--val_fraction must be in [0, 1), got 1.0"),
        # Parsed with the flags, whatever the schedule (the search decides on it): not after the data loads.
        (["--auto_task_weights", "like=1"], "--auto_task_weights: 'like=1' must be TASK:WEIGHT"),
        (["--auto_task_weights", "like:1,like:2"], "--auto_task_weights 'like:1,like:2' names task 'like' twice"),
        (["--auto_task_weights", "like:0"], "at least one weight must be positive"),
    ]:
        with pytest.raises(SystemExit):
            parse_config(argv)
        assert message in capsys.readouterr().err, argv
    assert parse_config(["--auto_task_weights", "like:1, love:0.5"]).auto.task_weight_values == {"like": 1.0, "love": 0.5}
