#!/usr/bin/python3
"""Hold an exclusive flock on PATH until killed; create PATH.ready once it is held."""

import fcntl
import sys
import time

path = sys.argv[1]
with open(path, "a") as handle:
    fcntl.flock(handle, fcntl.LOCK_EX)
    with open(path + ".ready", "w"):
        pass
    while True:
        time.sleep(3600)
