"""Imported only by the multiprocessing forkserver (see :func:`robustlab.execution.lifeline.worker_context`).

Importing it ties the forkserver to the robustlab process that started it, and every
process it forks to the forkserver, from the first instruction after the fork: a worker
killed while still importing torch would otherwise never reach its initialiser. When
robustlab dies, the forkserver dies, and with it every worker it forked.
"""

import os

from robustlab.execution.lifeline import die_with_parent
from robustlab.execution.tracker import keep_tracker_whole

die_with_parent()
os.register_at_fork(after_in_child=die_with_parent)
keep_tracker_whole()  # the workers it forks inherit the guard (robustlab.execution.tracker)
