"""Whether a checkpoint fits this run: shapes must match; other changed settings are listed."""

from typing import Any, Dict, List, Mapping, Sequence

from dlrm_multiepoch.config_section import CHANGES_SHAPES, STARTS_OR_PAUSES
from dlrm_multiepoch.data.dataset import TableSpec
from dlrm_multiepoch.run_files import CheckpointInfo, flat_config
from dlrm_multiepoch.train.config import record_paths

# Config fields (dotted paths into TrainConfig.to_dict(): the fields with the CHANGES_SHAPES role) that change
# parameter or optimizer-state shapes (--dense_cols: the dense input width; --task_thresholds: the number
# of tasks, i.e. head widths; --embedding_optimizer: row-wise or element-wise Adagrad state): a checkpoint
# loads only into a run with the same values. Table sizes, which follow from every data option, are
# compared separately.
SHAPE_FIELDS = record_paths(CHANGES_SHAPES)
# How this launch starts or pauses (the STARTS_OR_PAUSES role): a resume does not list them as changes.
START_FIELDS = record_paths(STARTS_OR_PAUSES)


def _get(config: Mapping[str, Any], dotted: str) -> Any:
    value: Any = config
    for part in dotted.split("."):
        value = value[part]
    return value


def check_compatible(
    info: CheckpointInfo, config: Mapping[str, Any], tables: Sequence[TableSpec], flag: str = "--resume"
) -> List[str]:
    """Refuse a checkpoint whose shapes differ from this run's; list the other changed settings.

    Args:
        info: the checkpoint to resume.
        config: this run's ``TrainConfig.to_dict()``.
        tables: this run's embedding tables (``InteractionData.tables``).
        flag: the flag that gave the checkpoint (``--resume`` or ``--start_from``), for the messages.

    Returns:
        ``"--flag saved -> now"`` for each other setting that differs (e.g. a longer
        ``--epochs``), for the log.

    Raises:
        ValueError: naming the first differing shape field (``--embedding_dim``, ...) or table.

    Example::

        for change in check_compatible(info, cfg.to_dict(), data.tables):
            log(f"resuming with {change}")
    """
    saved = info.state["config"]
    for dotted in SHAPE_FIELDS:
        before, now = _get(saved, dotted), _get(config, dotted)
        if before != now:
            field = "--" + dotted.split(".")[-1]
            raise ValueError(
                f"{flag} {info.path!r}: the checkpoint was trained with {field} {before!r}, this run has {now!r}; "
                f"{field} changes parameter shapes, so the checkpoint cannot be loaded (use {field} {before!r} or "
                f"start fresh)"
            )
    saved_tables: Dict[str, int] = info.state["tables"]
    current = {t.name: t.num_embeddings for t in tables}
    saved_data = flat_config(saved["data"], "data.")
    changed_data = [f"--{k.split('.')[-1]}" for k, v in saved_data.items() if _get(config, k) != v]
    for name in sorted(set(saved_tables) | set(current)):
        if saved_tables.get(name) != current.get(name):
            raise ValueError(
                f"{flag} {info.path!r}: table {name!r} has {saved_tables.get(name)} rows in the checkpoint but "
                f"{current.get(name)} in this run's data (data options changed: {changed_data or 'none'}; the "
                f"dataset's encoding must match)"
            )
    flat_now = flat_config(config)
    return [
        f"--{key.split('.')[-1]} {value!r} -> {flat_now.get(key)!r}"
        for key, value in flat_config(saved).items()
        if key not in START_FIELDS and flat_now.get(key) != value
    ]


def table_sharding(plan: Any) -> Dict[str, Dict[str, Any]]:
    """Each table's sharding in a ``DistributedModelParallel``'s ``plan``: its type and column split.

    Returns ``{"<module path>.<table>": {"type": sharding type, "column_shards": k}}``,
    ``k`` the number of column ranges its shards cover (1 unless column-wise split).
    """
    out = {}
    for path, module_plan in plan.plan.items():
        for table, sharding in module_plan.items():
            spec = sharding.sharding_spec
            columns = {s.shard_offsets[1] for s in spec.shards} if spec is not None else {0}
            out[f"{path}.{table}"] = {"type": sharding.sharding_type, "column_shards": len(columns)}
    return out


def check_sharding(info: CheckpointInfo, now: Mapping[str, Mapping[str, Any]], flag: str = "--resume") -> List[str]:
    """Refuse a checkpoint whose tables this run's plan shards so that their state differs; list other changes.

    The planner may place and shard a table otherwise on another world size, or even
    on the same one (it breaks ties between equal-cost plans differently from launch
    to launch). DCP reshards the weights and the fused optimizer's state across any
    row-wise layout (table-, row-, table-row-wise, and column-wise with one column
    range). A table may not become or stop being data-parallel (trained by the dense
    Adam instead of the fused optimizer) nor change its column split (per-column-shard
    optimizer state).

    Raises:
        ValueError: naming the table, both shardings and the flag to set.
    """
    saved: Dict[str, Dict[str, Any]] = info.state.get("sharding", {})
    changes = []
    for table in sorted(set(saved) & set(now)):
        before, after = saved[table], now[table]
        if before == after:
            continue
        data_parallel = {before["type"] == "data_parallel", after["type"] == "data_parallel"}
        if len(data_parallel) > 1 or before["column_shards"] != after["column_shards"]:
            raise ValueError(
                f"{flag} {info.path!r}: table {table} was {before['type']} ({before['column_shards']} column "
                f"shard(s)) in the checkpoint and the planner made it {after['type']} ({after['column_shards']}) "
                f"here, which keeps other optimizer state; pass --sharding_types {before['type']} (and the types "
                f"of the other tables) so the plan matches"
            )
        changes.append(f"table {table}: {before['type']} -> {after['type']} (resharded)")
    return changes
