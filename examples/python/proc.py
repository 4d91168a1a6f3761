"""What the tests share: DKV's address, and example programs run as real
processes whose output lines a test waits for."""

import os
import queue
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def dkv_endpoints():
    """$DKV_HTTP, or the test is skipped: the tests need a running DKV
    (examples/python/python_test.go starts a cluster and sets it)."""
    e = os.environ.get("DKV_HTTP")
    if not e:
        raise unittest.SkipTest("set DKV_HTTP to the HTTP URL(s) of a running DKV (dkv serve: http://127.0.0.1:7863)")
    return e


def fresh_prefix(name):
    """A key prefix of its own for one test run."""
    return "examples/python/%s/%s/" % (name, secrets.token_hex(3))


class Proc:
    """An example program run as a process of its own (python3 -u
    script args...), its output lines collected as they come."""

    def __init__(self, script, *args):
        self.args = [sys.executable, "-u", os.path.join(HERE, script)] + [str(a) for a in args]
        self.p = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=HERE)
        self.lines = []  # every line so far
        self._q = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            line = line.rstrip("\n")
            self.lines.append(line)
            self._q.put(line)
        self.p.stdout.close()
        self._q.put(None)

    def wait_line(self, pattern, timeout=20.0):
        """The match of the first new line matching pattern; fails after
        timeout seconds or when the process ends without one."""
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("no line matching %r within %.0fs; output:\n%s" % (pattern, timeout, self.output()))
            try:
                line = self._q.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                self._q.put(None)
                raise AssertionError("process ended (%s) before a line matching %r; output:\n%s"
                                     % (self.p.wait(), pattern, self.output()))
            m = rx.search(line)
            if m:
                return m

    def skip(self):
        """Marks every line so far as seen: the next wait_line matches a
        line yet to come."""
        while True:
            try:
                line = self._q.get_nowait()
            except queue.Empty:
                return
            if line is None:
                self._q.put(None)
                return

    def output(self):
        return "\n".join("    " + line for line in self.lines)

    def signal(self, sig):
        if self.p.poll() is None:
            self.p.send_signal(sig)

    def stop(self, timeout=10.0):
        """SIGTERM, then SIGKILL after timeout; returns the exit code."""
        self.signal(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
        self.signal(signal.SIGTERM)
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return self.p.wait()

    def kill(self):
        self.signal(signal.SIGKILL)
        self.p.wait()
