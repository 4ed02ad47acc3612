"""Where a run stands: steps done and the data position, saved with every checkpoint."""

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Dict, Mapping

from dlrm_multiepoch.json_state import pack_json_state, unpack_json_state
from dlrm_multiepoch.saved_state import StateMismatch, check_count, check_state


@dataclass
class TrainProgress:
    """The training position, a ``Stateful`` saved (as JSON) in every checkpoint.

    The data position is ``(epoch, batch_in_epoch)``: the epoch in progress and how
    many of its global batches are done. With the block shuffle each rank reads its own
    share of an epoch's order, so a mid-epoch position continues only on the same number
    of ranks and batch size (``check_resumable`` refuses others); an end-of-epoch
    position continues on any.

    Args:
        step: optimizer steps done over the whole run.
        epoch: the epoch in progress (0-based); equals ``--epochs`` when the run is done.
        batch_in_epoch: global batches of ``epoch`` done.
        wall_time_s: training time of the launches before this one.
        skipped_nonfinite: batches skipped for a non-finite loss (``--skip_nonfinite_batches``).

    Example::

        progress = TrainProgress(step=125, epoch=1, batch_in_epoch=5)
        progress.load_state_dict(progress.state_dict())
    """

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    wall_time_s: float = 0.0
    skipped_nonfinite: int = 0

    def state_dict(self) -> Dict[str, Any]:
        """The fields, packed so that ``dcp.load`` finds them on any sharding (:mod:`dlrm_multiepoch.json_state`)."""
        return pack_json_state(asdict(self))

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue at the saved position (packed or plain); StateMismatch names a missing, mistyped or negative
        field."""
        state = unpack_json_state("train progress", state)
        check_state("train progress", state, {f.name: f.type for f in fields(self)})
        values = {
            f.name: float(state[f.name]) if f.type is float else check_count("train progress", f.name, state[f.name])
            for f in fields(self)
        }
        if not values["wall_time_s"] >= 0:
            raise StateMismatch(f"train progress: the saved 'wall_time_s' is {values['wall_time_s']}, expected >= 0")
        for name, value in values.items():
            setattr(self, name, value)

    def __str__(self) -> str:
        if self.batch_in_epoch == 0:
            return f"step {self.step}, {self.epoch} epoch(s) done"
        return f"step {self.step}, epoch {self.epoch + 1} at batch {self.batch_in_epoch}"


def pause_step(stop_at_epoch: float, steps_per_epoch: int) -> int:
    """The step ``--stop_at_epoch`` pauses at, ``round(stop_at_epoch * steps_per_epoch)`` (0: no pause).

    Raises:
        ValueError: a pause inside an epoch that rounds to an epoch's end (too few steps per epoch), naming
            the flag and what to change.
    """
    step = math.floor(stop_at_epoch * steps_per_epoch + 0.5)
    if stop_at_epoch and not float(stop_at_epoch).is_integer() and steps_per_epoch and step % steps_per_epoch == 0:
        raise ValueError(
            f"--stop_at_epoch {stop_at_epoch:g} pauses inside epoch {math.ceil(stop_at_epoch)}, but with "
            f"{steps_per_epoch} step(s) per epoch it rounds to step {step}, an epoch's end: too few steps per epoch to "
            "pause inside one. Pause at a whole epoch, or take more steps per epoch (a smaller --batch_size); a "
            "schedule search judges inside epochs unless given --rung_fraction 1"
        )
    return step
