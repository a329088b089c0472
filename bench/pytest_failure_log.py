"""A pytest plugin for leased GPU calls: each failure's traceback, written as it happens.

A call cut short by its time limit prints no summary and writes no JUnit file; this file
(``GPUBPE_FAILURE_LOG``) still holds every failure seen until then. ``bench/gpu_node.sh``
loads it with ``-p pytest_failure_log`` (``bench/`` on ``PYTHONPATH``); under pytest-xdist
the reports reach the controller, which writes them.
"""

import os

_LONGEST = 4000  # characters of each traceback: its end, where the error is


def pytest_runtest_logreport(report):
    path = os.environ.get("GPUBPE_FAILURE_LOG")
    in_worker = "PYTEST_XDIST_WORKER" in os.environ  # its controller writes it once
    if not path or not report.failed or in_worker:
        return
    text = report.longreprtext
    with open(path, "a", encoding="utf-8") as log:
        log.write(f"=== {report.nodeid} ({report.when})\n{text[-_LONGEST:]}\n\n")
