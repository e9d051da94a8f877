"""Running a command and taking the moment it ended, for the benchmarks that time launchers.

subprocess.run(..., timeout=T) waits by polling (waitpid with WNOHANG, then sleeps that
double from 0.5 ms up to 50 ms): an end is seen up to 50 ms late, and a 10 ms job reads as
15.5 ms. Here the wait blocks in waitpid, and a timer kills what runs past the timeout.
"""
import subprocess
import threading
import time


def run_waited(command, timeout_s, **popen_args):
    """Runs `command` to its end; returns (exit code, time.time() at its end). A run past
    `timeout_s` is killed and raises subprocess.TimeoutExpired."""
    proc = subprocess.Popen(command, **popen_args)
    killed = threading.Event()

    def kill():
        killed.set()
        proc.kill()

    timer = threading.Timer(timeout_s, kill)
    timer.start()
    try:
        code = proc.wait()  # no timeout: a blocking waitpid
        ended = time.time()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        timer.cancel()
    if killed.is_set():
        raise subprocess.TimeoutExpired(command, timeout_s)
    return code, ended
