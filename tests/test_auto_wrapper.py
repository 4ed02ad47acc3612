"""AutoFreezeSchedule on a real (unsharded) TorchRec DLRM in a plain loop, scripted metrics.

The decisions come from a scripted validation curve; the freezing is real: the tables
are bitwise unchanged exactly while the schedule keeps them frozen, the gate follows
the policy, and the decisions so far read back as a fixed schedule in steps.
"""

import torch
from torch import nn
from torchrec.models.dlrm import DLRM
from torchrec.modules.embedding_modules import EmbeddingBagCollection

from dlrm_multiepoch.auto import AutoFreezeSchedule, AutoScheduleConfig
from dlrm_multiepoch.data.loader import BatchLoader
from dlrm_multiepoch.data.synthetic import synthetic_data
from dlrm_multiepoch.gates import GradientGate
from dlrm_multiepoch.models.dlrm import MultiTaskTrain, embedding_bag_configs
from dlrm_multiepoch.schedule import FreezeSchedule

STEPS_PER_EPOCH = 4


def _tables(model: nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items() if "embedding_bags" in k}


def test_auto_schedule_freezes_trains_and_refreezes_tables_at_the_decided_steps() -> None:
    torch.manual_seed(0)
    data = synthetic_data(640, {"user": 50, "item": 80}, tasks=("like",))
    ebc = EmbeddingBagCollection(tables=embedding_bag_configs(data.tables, 8), device=torch.device("cpu"))
    dlrm = DLRM(
        embedding_bag_collection=ebc, dense_in_features=4, dense_arch_layer_sizes=[16, 8], over_arch_layer_sizes=[8, 1]
    )
    dlrm.sparse_arch = nn.Sequential(dlrm.sparse_arch, GradientGate("feature_cross"))
    model = MultiTaskTrain(dlrm, data.tasks)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)  # unsharded: the tables train by the dense optimizer
    config = AutoScheduleConfig(
        auto_evals_per_epoch=2, auto_patience=1, auto_min_improvement=0.0, auto_gate="feature_cross",
        auto_gate_gap=0.05, auto_metric="logloss", auto_min_tables_epochs=0.0,  # the scripted curves are logloss
    )  # fmt: skip
    auto = AutoFreezeSchedule(model, STEPS_PER_EPOCH, 3, data.tasks, optimizer=opt, config=config)
    assert auto.eval_every_n_steps == 2 and auto.frozen_tables() == ["item", "user"]
    gate = dlrm.sparse_arch[1]
    # (validation, train-sample) logloss at steps 2, 4, ...: plateau at 4, the gap grows
    # at 8 (gate closes), plateau at 10 (tables frozen again) and 12 (stop).
    scripted = {2: (0.70, 0.70), 4: (0.71, 0.70), 6: (0.60, 0.59), 8: (0.55, 0.40), 10: (0.58, 0.40), 12: (0.57, 0.4)}
    loader = BatchLoader(data, "train", 128, shuffle=True)
    assert len(loader) == 4
    tables_moved, gate_open = {}, {}
    before = _tables(model)
    for epoch in range(3):
        loader.set_epoch(epoch)
        for batch in loader:
            opt.zero_grad()
            loss, _ = model(batch)
            loss.backward()
            opt.step()
            auto.step()
            after = _tables(model)
            tables_moved[auto.global_step] = any(not torch.equal(before[k], after[k]) for k in before)
            before = after
            if auto.evaluation_due():
                v, t = scripted[auto.global_step]
                decision = auto.observe({"like": {"logloss": v}}, train={"like": {"logloss": t}})
                gate_open[auto.global_step] = gate.open
                if decision.stop:
                    break
        if auto.stopped:
            break
    # Steps 1-4 frozen, 5-8 train, 9-10 train behind the closed gate (it carries every
    # gradient into the tables here, so they stay put), 11-12 frozen again.
    moved = [s for s in range(5, 9)]
    assert tables_moved == {s: s in moved for s in range(1, 13)}
    assert [(d.step, d.transition, d.gates) for d in auto.decisions if d.transition or d.gates] == [
        (4, "frozen->joint", {}),
        (8, "", {"feature_cross": False}),
        (10, "joint->dense", {}),
        (12, "dense->done", {}),
    ]
    assert gate_open == {2: True, 4: True, 6: True, 8: False, 10: False, 12: False}
    # The decision at the last step changes nothing left to run.
    expected = "tables=frozen@[0step,4step) train@[4step,10step) frozen@[10step,end); "
    expected += "gate:feature_cross=open@[0step,8step) closed@[8step,end)"
    assert str(auto.schedule) == expected
    assert FreezeSchedule.parse(expected) == auto.schedule  # replayable as a fixed schedule
    # The state round-trips into a fresh wrapper at the same step and schedule.
    again = AutoFreezeSchedule(model, STEPS_PER_EPOCH, 3, data.tasks, optimizer=opt, config=config)
    again.load_state_dict(auto.state_dict())
    assert (again.global_step, str(again.schedule), again.stopped) == (12, expected, True)
    auto.remove()
    again.remove()
    assert gate.open
