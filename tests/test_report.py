import pytest
from torch.utils.tensorboard import SummaryWriter

from dlrm_multiepoch.report import eval_table, format_comparison


def _write_run(path, aucs):
    with SummaryWriter(str(path)) as w:
        for i, (epoch, auc) in enumerate(aucs):
            step = 10 * (i + 1)
            w.add_scalar("eval/epoch", epoch, step)
            w.add_scalar("test/like/auc", auc, step)
            w.add_scalar("train/loss", 0.5, step)


def test_table_maps_steps_to_epochs_and_compares_runs(tmp_path):
    _write_run(tmp_path / "joint", [(0.5, 0.70), (1, 0.74), (2, 0.71)])
    _write_run(tmp_path / "delayed", [(1, 0.55), (2, 0.745)])
    assert eval_table(str(tmp_path / "joint")) == {"like": {0.5: pytest.approx(0.70), 1.0: pytest.approx(0.74), 2.0: pytest.approx(0.71)}}
    text = format_comparison([str(tmp_path / "joint"), str(tmp_path / "delayed")])
    assert "| run | task | ep 1 | ep 2 |" in text
    assert "| joint | like | 0.7400 | 0.7100 |" in text
    assert "| delayed | like | 0.5500 | 0.7450 |" in text


def test_missing_or_foreign_folders_raise_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        eval_table(str(tmp_path / "nope"))
    with SummaryWriter(str(tmp_path / "other")) as w:
        w.add_scalar("loss", 1.0, 0)
    with pytest.raises(ValueError, match="holds no evaluations"):
        eval_table(str(tmp_path / "other"))
