"""Each flag's roles are metadata on its config field; every list of flag names the modules read is derived from them.

``TODAY`` pins each derived list to the literal it replaced (written by hand in its module until the
roles replaced them), so the derivation changed no list: the same names, in the order of the training
app's ``--help`` (each list's literal is put in that order here). ``--val_gap`` and ``--val_unseen_share``
joined the preprocess component: they decide the encoded data as ``--val_fraction`` does. A new flag
with roles is written here too, in each list it joins: the lists decide what reruns, branches and
compare accept, so a change to one is a reviewed line, not a side effect.
"""

import dataclasses

import pytest

import dlrm_multiepoch.components as components
from dlrm_multiepoch.config_section import ROLES, roles_of
from dlrm_multiepoch.report.groups import BOOKKEEPING
from dlrm_multiepoch.run_files import flat_config
from dlrm_multiepoch.search.checks import LAUNCH_FLAGS
from dlrm_multiepoch.search.command import BRANCH_FLAGS
from dlrm_multiepoch.sweep.manifest import PLACE_FLAGS
from dlrm_multiepoch.sweep.plan import SWEEP_FLAGS
from dlrm_multiepoch.train.checkpoint.compat import SHAPE_FIELDS, START_FIELDS
from dlrm_multiepoch.train.config import TrainConfig, config_fields
from dlrm_multiepoch.train.pretrain import NOT_APPLIED
from dlrm_multiepoch.train.start_point import SUFFIX_FIELDS

# The lists as they were written by hand (main at a1e92cf), each in its module's order.
TODAY = {
    "TRAIN_PARAMS": (
        "dataset", "data_path", "max_rows", "history_length", "model", "embedding_dim", "dense_arch_layer_sizes",
        "over_arch_layer_sizes", "learning_rate", "embedding_learning_rate", "epochs", "batch_size", "seed",
        "freeze_schedule", "pipeline", "pretrained_tables", "tensorboard_dir", "run_name", "resume",
    ),
    "SWEEP_PARAMS": (
        "dataset", "data_path", "max_rows", "history_length", "model", "embedding_dim", "learning_rate",
        "embedding_learning_rate", "batch_size", "pipeline", "pretrained_tables",
    ),
    "PREPROCESS_PARAMS": (
        "dataset", "data_path", "criteo_hash_size", "max_rows", "min_count", "test_fraction", "val_fraction",
        "preprocess_workers", "preprocess_chunk_mb", "val_gap", "val_unseen_share",  # the last two: new
    ),
    "SUFFIX_FIELDS": (  # data.data_path: new (issue 35: a branch reads its data anywhere; other data is said)
        "epochs", "data.data_path", "freeze_schedule", "optim.reinit", "auto.", "run_name", "tensorboard_dir", "resume", "start_from",
        "stop_at_epoch", "overwrite", "eval_every_n_steps", "eval_batch_size", "train_eval_rows", "log_every_n_steps",
        "progress_bar", "checkpoint", "checkpoint_every_n_steps", "keep_checkpoints", "prefetch_batches",
    ),
    "NOT_APPLIED": (
        "freeze_schedule", "pretrained_tables", "auto.", "start_from", "eval_every_n_steps", "eval_batch_size",
        "train_eval_rows", "id_dropout", "optim.table_lr_warmup", "optim.table_lr_decay", "optim.table_lr_final",
        "optim.falr", "optim.reinit", "optim.grad_accum_steps", "optim.grad_accum_lr_rule",
    ),
    "SWEEP_FLAGS": ("epochs", "seed", "tensorboard_dir", "run_name", "resume"),
    "PLACE_FLAGS": ("tensorboard_dir", "run_name", "resume", "overwrite", "progress_bar", "stop_at_epoch"),
    "BRANCH_FLAGS": (
        "freeze_schedule", "reinit", "start_from", "stop_at_epoch", "keep_checkpoints", "checkpoint",
        "checkpoint_every_n_steps",
    ),
    "LAUNCH_FLAGS": ("stop_at_epoch", "keep_checkpoints", "start_from"),
    "SHAPE_FIELDS": (
        "data.dataset", "data.history_length", "data.dense_cols", "data.task_thresholds", "model.model",
        "model.embedding_dim", "model.dense_arch_layer_sizes", "model.over_arch_layer_sizes", "model.dcn_num_layers",
        "model.dcn_low_rank_dim", "model.transformer_layers", "model.transformer_heads", "model.transformer_ff_dim",
        "model.sequence_head_layer_sizes", "optim.embedding_optimizer",
    ),
    "START_FIELDS": ("resume", "start_from", "stop_at_epoch", "overwrite"),  # compat.py's unnamed tuple
    "BOOKKEEPING": (
        "seed", "run_name", "tensorboard_dir", "resume", "progress_bar", "log_every_n_steps", "cache_dir",
        "checkpoint", "checkpoint_every_n_steps", "keep_checkpoints", "overwrite", "preprocess_workers",
        "preprocess_chunk_mb",
    ),
}  # fmt: skip
DERIVED = {
    "TRAIN_PARAMS": components.TRAIN_PARAMS, "SWEEP_PARAMS": components.SWEEP_PARAMS,
    "PREPROCESS_PARAMS": components.PREPROCESS_PARAMS, "SUFFIX_FIELDS": SUFFIX_FIELDS, "NOT_APPLIED": NOT_APPLIED,
    "SWEEP_FLAGS": SWEEP_FLAGS, "PLACE_FLAGS": PLACE_FLAGS, "BRANCH_FLAGS": BRANCH_FLAGS, "LAUNCH_FLAGS": LAUNCH_FLAGS,
    "SHAPE_FIELDS": SHAPE_FIELDS, "START_FIELDS": START_FIELDS, "BOOKKEEPING": tuple(BOOKKEEPING),
}  # fmt: skip


def _help_order(names):
    """``names`` (flags or record paths) in the order of the training app's ``--help``."""
    position = {name: i for i, name in enumerate(config_fields())}
    first_in_section = {}
    for i, f in enumerate(config_fields().values()):
        first_in_section.setdefault(f.path.split(".")[0] + ".", i)
    return tuple(sorted(names, key=lambda n: first_in_section[n] if n.endswith(".") else position[n.split(".")[-1]]))


@pytest.mark.parametrize("name", sorted(TODAY))
def test_each_derived_list_is_the_list_it_replaced(name):
    derived = DERIVED[name] if name != "BOOKKEEPING" else _help_order(BOOKKEEPING)
    assert derived == _help_order(TODAY[name]), (
        f"{name} changed: a flag's roles now put it in (or take it out of) this list; if meant, write it in TODAY"
    )


def test_every_derived_list_names_flags_that_exist():
    """A renamed or deleted flag fails here (and a role nobody has, or a misspelt one, at import)."""
    flags = set(config_fields())
    paths = set(flat_config(TrainConfig().to_dict()))
    for name, derived in DERIVED.items():
        assert len(set(derived)) == len(derived), name
        for entry in derived:
            if "." in entry:  # a record path, or a section's prefix
                assert entry in paths or any(p.startswith(entry) for p in paths if entry.endswith(".")), (name, entry)
            else:
                assert entry in flags, (name, entry)
    used = {r for f in config_fields().values() for r in f.roles}
    assert used == set(ROLES), f"roles no flag has: {sorted(set(ROLES) - used)}"


def test_an_unknown_role_is_refused_by_name():
    @dataclasses.dataclass
    class Section:
        x: int = dataclasses.field(default=0, metadata={"help": "x", "roles": ("placse",)})

    with pytest.raises(ValueError, match=r"field 'x': unknown roles \['placse'\]"):
        roles_of(dataclasses.fields(Section)[0])
