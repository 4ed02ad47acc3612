"""Helpers for tests and benchmarks of TorchRec code, as ``torch.testing`` is for PyTorch's.

The package's own tests and benchmarks import these (neither borrows from the other), and
so can a user's tests of a loop built with the parts:

- :mod:`dlrm_multiepoch.testing.ranks`: :func:`~dlrm_multiepoch.testing.ranks.run_on_ranks`
  (a function on several gloo ranks, each a process forked from a server that imported
  torch, TorchRec and FBGEMM once) and a 1-rank process group in this process;
- :mod:`dlrm_multiepoch.testing.dlrm_job`: a small, really sharded TorchRec DLRM job on
  synthetic data, identical on every call with the same arguments, and the sharding helpers
  it is built with (a planner that gives each table its sharding type, full tables copied
  into shards).

Nothing in the rest of the package imports this one; importing it loads torch.

Example::

    from dlrm_multiepoch.testing.dlrm_job import build_job
    from dlrm_multiepoch.testing.ranks import run_on_ranks

    def _check(rank: int, world_size: int) -> None:   # at module level: it is pickled into the ranks
        job = build_job(num_rows=256)
        ...

    run_on_ranks(_check, 2)
"""
