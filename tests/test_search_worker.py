"""The search's training job that trains branch segments one after another (search/worker.py, search/segments.py):
its requests, its stop when the search is gone, and its TorchX job. Real segments run in tests/test_search_runs.py
(every launch there goes through the worker)."""

import json
import os
import subprocess
import sys

from dlrm_multiepoch.json_io import write_json
from dlrm_multiepoch.launch_options import LaunchOptions
from dlrm_multiepoch.search.segments import WORKER_MODULE, SegmentWorker
from dlrm_multiepoch.search.worker import DRIVER_ENV, STOP_FILE, driver_alive, next_request, request_path


def test_requests_are_read_in_order_and_a_gone_search_stops_the_job(tmp_path, monkeypatch):
    queue = str(tmp_path)
    write_json(request_path(queue, 1), {"run": "joint-s0", "flags": ["--epochs", "4"]})
    monkeypatch.setenv(DRIVER_ENV, f"{os.getpid()}:")
    assert driver_alive(os.environ[DRIVER_ENV]) and driver_alive(None)
    assert next_request(queue, 1, is_main=True) == {"run": "joint-s0", "flags": ["--epochs", "4"]}
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    monkeypatch.setenv(DRIVER_ENV, f"{gone.stdout.strip()}:")  # a process that has ended
    assert not driver_alive(os.environ[DRIVER_ENV])
    assert next_request(queue, 2, is_main=True) is None
    assert json.loads((tmp_path / STOP_FILE).read_text()) == {"why": "the search is gone"}
    assert next_request(queue, 2, is_main=False) is None  # now every rank stops


def test_the_job_runs_the_worker_module_with_the_searchs_launch_options(tmp_path):
    options = LaunchOptions(j="1x2", env={"NCCL_DEBUG": "WARN"})
    worker = SegmentWorker(str(tmp_path / "exp"), options)
    worker.queue = str(tmp_path / "queue")
    (role,) = worker.app().roles
    command = " ".join(role.args)
    assert f"-m {WORKER_MODULE} {tmp_path / 'queue'}" in command and "--nproc_per_node 2" in command
    assert role.env["NCCL_DEBUG"] == "WARN" and role.env[DRIVER_ENV].startswith(f"{os.getpid()}:")
