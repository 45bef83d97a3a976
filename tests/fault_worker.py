"""`gradlab worker` with faults injected by marker comments in the code, for tests/test_faults.py.

The real worker loop, lease keeper and warm sandbox pool grade everything; only code carrying a
marker is treated differently, before grading:
  FAULT_CRASH  the worker process dies at once (os._exit) while it holds the job's lease
  FAULT_RAISE  grading raises (a bug on our side, not the learner's code)
  FAULT_HOLD   grading waits GRADLAB_TEST_HOLD_S first (a job long enough to kill a worker in)

Run as `python -m tests.fault_worker`; settings from the environment like `gradlab worker`.
"""

import os
import time
from typing import Any

import worker.main
from gradlab.config import get_settings
from gradlab.logs import configure_logging
from gradlab.results import GradeResult

FAULT_CRASH = "# gradlab-test-fault: crash"
FAULT_RAISE = "# gradlab-test-fault: raise"
FAULT_HOLD = "# gradlab-test-fault: hold"

_real_grade = worker.main.grade


def _grade_with_faults(**kwargs: Any) -> GradeResult:
    code: str = kwargs["code"]
    if FAULT_CRASH in code:
        os._exit(70)
    if FAULT_RAISE in code:
        raise RuntimeError("injected fault")
    if FAULT_HOLD in code:
        time.sleep(float(os.environ.get("GRADLAB_TEST_HOLD_S", "2")))
    return _real_grade(**kwargs)


def main() -> None:
    settings = get_settings()
    configure_logging(settings.log_format)
    worker.main.grade = _grade_with_faults  # type: ignore[assignment]
    worker.main.run_worker(settings=settings)


if __name__ == "__main__":
    main()
