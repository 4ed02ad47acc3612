"""GradientGate on a small two-path model over shared tables: forward unchanged, one path's gradient cut."""

import logging
from typing import Dict

import pytest
import torch
from torch import nn
from torchrec.modules.embedding_configs import EmbeddingBagConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor, KeyedTensor

from dlrm_multiepoch.freeze import FreezeScheduleWrapper
from dlrm_multiepoch.gates import GradientGate, detach_value


class TwoPath(nn.Module):
    """Cross path (MLP over concatenated embeddings) + deep path (sum of embeddings), same tables."""

    def __init__(self, gated: bool, detach_cross: bool = False) -> None:
        super().__init__()
        self.ebc = EmbeddingBagCollection(
            tables=[EmbeddingBagConfig(name=t, embedding_dim=4, num_embeddings=10, feature_names=[t]) for t in ("u", "i")]
        )
        self.cross_gate = GradientGate("cross") if gated else nn.Identity()
        self.deep_gate = GradientGate("deep") if gated else nn.Identity()
        self.detach_cross = detach_cross
        self.cross = nn.Linear(8, 1)
        self.deep = nn.Linear(4, 1)

    def forward(self, kjt: KeyedJaggedTensor) -> torch.Tensor:
        kt: KeyedTensor = self.ebc(kjt)
        cross_in = self.cross_gate(kt.values())
        if self.detach_cross:  # the reference: path hard-cut by hand
            cross_in = cross_in.detach()
        deep_in = self.deep_gate(kt)
        return self.cross(cross_in) + self.deep(deep_in["u"] + deep_in["i"])


def _kjt() -> KeyedJaggedTensor:
    return KeyedJaggedTensor.from_lengths_sync(
        keys=["u", "i"], values=torch.tensor([1, 2, 3, 1, 4, 5, 6, 4]), lengths=torch.ones(8, dtype=torch.int32)
    )


def _grads(model: nn.Module) -> Dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    out = model(_kjt())
    out.square().sum().backward()
    return {n: (p.grad.clone() if p.grad is not None else None) for n, p in model.named_parameters()}, out.detach()


def _pair(**kwargs):
    torch.manual_seed(0)
    gated = TwoPath(gated=True)
    plain = TwoPath(gated=False, **kwargs)
    plain.load_state_dict(gated.state_dict())
    return gated, plain


def test_open_gates_change_nothing() -> None:
    gated, plain = _pair()
    g_grads, g_out = _grads(gated)
    p_grads, p_out = _grads(plain)
    assert torch.equal(g_out, p_out)
    for name in p_grads:
        assert torch.equal(g_grads[name], p_grads[name]), name


def test_closed_gate_cuts_only_its_path() -> None:
    gated, reference = _pair(detach_cross=True)
    gated.cross_gate.open = False
    g_grads, g_out = _grads(gated)
    r_grads, r_out = _grads(reference)
    _, full_out = _grads(_pair()[1])
    assert torch.equal(g_out, full_out)  # forward values unchanged by closing
    for name in r_grads:  # tables get exactly the deep path's gradient; heads train as before
        assert torch.equal(g_grads[name], r_grads[name]), name
    table = "ebc.embedding_bags.u.weight"
    assert g_grads[table].abs().sum() > 0


def test_both_gates_closed_leave_tables_without_gradient() -> None:
    gated, _ = _pair()
    gated.cross_gate.open = gated.deep_gate.open = False
    grads, _ = _grads(gated)
    assert grads["ebc.embedding_bags.u.weight"] is None and grads["ebc.embedding_bags.i.weight"] is None
    assert grads["cross.weight"] is not None and grads["deep.weight"] is not None


def test_schedule_drives_gates_by_name() -> None:
    gated, _ = _pair()
    freeze = FreezeScheduleWrapper(gated, "gate:cross=closed@[1,2)", steps_per_epoch=2, num_epochs=2)
    seen = []
    for _ in range(4):
        seen.append((gated.cross_gate.open, gated.deep_gate.open, freeze.states()["gate:cross"]))
        freeze.step()
    assert seen == [(True, True, 1), (True, True, 1), (False, True, 0), (False, True, 0)]
    with pytest.raises(ValueError, match="no GradientGate named 'tower' in the model; gates: \\['cross', 'deep'\\]"):
        FreezeScheduleWrapper(gated, "gate:tower=closed", steps_per_epoch=2, num_epochs=2)


def test_a_gate_closed_for_the_whole_run_stays_closed_at_its_end(caplog) -> None:
    """Issue 38, row 4: `delayed; gate:cross=closed` holds the gate closed for the whole run; reaching the end
    (the step count after the last step, where no step runs) changes nothing and logs nothing."""
    gated, _ = _pair()
    opt = torch.optim.SGD(gated.parameters(), lr=0.1)
    with caplog.at_level(logging.INFO, logger="dlrm_multiepoch.freeze.wrapper"):
        freeze = FreezeScheduleWrapper(gated, "delayed; gate:cross=closed", steps_per_epoch=2, num_epochs=2, optimizer=opt)
        for _ in range(4):
            freeze.step()
    assert freeze.global_step == 4 and freeze.states() == {"tables": 1, "gate:cross": 0} and not gated.cross_gate.open
    assert [r.getMessage() for r in caplog.records] == [
        "freeze schedule at step 0 (epoch 0.000): tables frozen, gate:cross closed",
        "freeze schedule at step 2 (epoch 1.000): tables train",
    ]


def test_step_applies_the_same_state_as_jumping_to_each_step() -> None:
    """step() re-applies only at window boundaries; every step must match a full re-apply."""
    gated, _ = _pair()
    schedule = "tables=frozen@[0,3step) train@[3step,end); table:u=frozen@[5step,7step); gate:cross=closed@[1,1.5)"
    opt = torch.optim.SGD(gated.parameters(), lr=0.1)  # unsharded tables: the dense optimizer trains them
    stepped = FreezeScheduleWrapper(gated, schedule, steps_per_epoch=4, num_epochs=2, optimizer=opt)
    observed = []
    for _ in range(8):
        observed.append((stepped.states(), stepped.frozen_tables(), gated.cross_gate.open))
        stepped.step()
    with pytest.raises(ValueError, match="outside the scheduled run of 8 steps"):
        stepped.step()
    stepped.remove()
    jumped = FreezeScheduleWrapper(gated, schedule, steps_per_epoch=4, num_epochs=2, optimizer=opt)
    expected = []
    for step in range(8):
        jumped.set_progress(step)
        expected.append((jumped.states(), jumped.frozen_tables(), gated.cross_gate.open))
    assert observed == expected
    assert [f for _, f, _ in observed] == [["i", "u"]] * 3 + [[], [], ["u"], ["u"], []]
    assert [o for _, _, o in observed] == [True] * 4 + [False, False, True, True]


def test_detach_value_keeps_structure_and_values() -> None:
    x = torch.randn(3, 4, requires_grad=True)
    kt = KeyedTensor(keys=["a", "b"], length_per_key=[1, 3], values=x)
    out = detach_value({"kt": kt, "pair": (x, [x])})
    assert torch.equal(out["kt"].values(), x) and not out["kt"].values().requires_grad
    assert out["kt"].keys() == ["a", "b"] and not out["pair"][1][0].requires_grad
    with pytest.raises(TypeError, match="cannot detach a int"):
        detach_value(3)
    with pytest.raises(ValueError, match="non-empty name"):
        GradientGate("")
