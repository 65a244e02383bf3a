"""Worker processes that end with the process that made them.

A ``ProcessPoolExecutor`` worker (spawn) blocks on its call queue, and holds that queue's
write end itself, so it never sees end-of-file when its parent is killed (SIGKILL, an OOM
kill): it would live on, orphaned, holding its memory. :func:`exit_with_parent`, called from
a pool initializer, ends the worker within ``poll_s`` seconds of its parent's death.
"""

from __future__ import annotations

import os
import threading
import time


def exit_with_parent(poll_s: float = 0.5) -> None:
    """Start a daemon thread that ends this process (``os._exit(1)``) once its parent is gone.

    The parent is the one at the time of the call; the thread notices its death by the
    process being re-parented (``os.getppid()`` changes), checked every ``poll_s`` seconds.
    """
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
