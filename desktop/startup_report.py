"""Milestones for bench/startup.py: when `PERSONAL_LLM_STARTUP_REPORT` names a file, the app appends one
JSON line per milestone (window painted, engine opened, model ready) with a wall-clock time."""

from __future__ import annotations

import json
import os
import time

REPORT_ENV = "PERSONAL_LLM_STARTUP_REPORT"


def mark(event: str, **extra: object) -> None:
    path = os.environ.get(REPORT_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        record = {"event": event, "t": time.time(), "cpu": time.process_time(), "pid": os.getpid(), **extra}
        f.write(json.dumps(record) + "\n")
