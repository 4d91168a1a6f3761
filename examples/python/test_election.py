"""The election's guarantee: one leader at a time, and a deposed leader's
late write is refused, so every run of the job is recorded once."""

import signal
import time
import unittest

import dkv
from proc import Proc, dkv_endpoints, fresh_prefix

TTL = 3.0  # seconds; long enough that a loaded machine does not depose a leader that runs


def wait_for(what, cond, timeout=30.0):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("not within %.0fs: %s" % (timeout, what))
        time.sleep(0.05)


class ElectionTest(unittest.TestCase):
    def setUp(self):
        self.client = dkv.Client(dkv_endpoints())
        self.workers = {}

    def tearDown(self):
        for w in self.workers.values():
            w.stop()

    def start(self, name, prefix, *flags):
        w = Proc("election.py", "--dkv", dkv_endpoints(), "--name", name, "--prefix", prefix,
                 "--ttl", TTL, "--every", 0.3, *flags)
        self.workers[name] = w
        return w

    def runs(self, prefix):
        kvs, _ = self.client.list(prefix + "runs/")
        return {int(kv.key[len(prefix) + 5:]): kv for kv in kvs}

    def freeze_the_leader(self, *flags):
        """w1 leads; it is paused (SIGSTOP) in the middle of a run, past
        its TTL, and resumed once another worker has done that run.
        Returns the prefix, the run and the frozen worker."""
        prefix = fresh_prefix("election")
        w1 = self.start("w1", prefix, *flags)
        w1.wait_line(r"^w1: leader \(term \d+\)")
        for name in ("w2", "w3"):
            self.start(name, prefix, *flags).wait_line(r"campaigning")
        w1.wait_line(r"run \d+: done")
        w1.skip()
        n = int(w1.wait_line(r"run (\d+): working").group(1))
        w1.signal(signal.SIGSTOP)
        frozen_at = time.monotonic()
        # Another worker takes over once w1's lease expires, and does run n.
        kv = wait_for("run %d done by another worker" % n, lambda: self.runs(prefix).get(n), timeout=10 * TTL)
        print("\nw1 frozen in run %d; %s did it %.1fs later (TTL %.0fs)"
              % (n, kv.value.decode(), time.monotonic() - frozen_at, TTL))
        self.assertNotEqual(kv.value, b"w1")
        w1.signal(signal.SIGCONT)
        return prefix, n, w1

    def test_paused_leader_late_write_refused_and_killed_leader_replaced(self):
        prefix, n, w1 = self.freeze_the_leader()
        w1.wait_line(r"run %d: write REFUSED, no longer the leader" % n)
        self.assertEqual(self.runs(prefix)[n].version, 1, "run %d recorded twice" % n)

        # Now kill the new leader outright: a third takes over within the TTL.
        leader = self.runs(prefix)[n].value.decode()
        before = max(self.runs(prefix))
        self.workers[leader].kill()
        killed_at = time.monotonic()
        kv = wait_for("a run after %s was killed" % leader, lambda: self.runs(prefix).get(before + 2), timeout=10 * TTL)
        print("%s killed; %s led %.1fs later" % (leader, kv.value.decode(), time.monotonic() - killed_at))
        self.assertNotEqual(kv.value.decode(), leader)

        for w in self.workers.values():
            w.stop()
        runs = self.runs(prefix)
        self.assertEqual(sorted(runs), list(range(1, max(runs) + 1)), "a run skipped")
        twice = {i: kv.version for i, kv in runs.items() if kv.version != 1}
        self.assertEqual(twice, {}, "runs recorded more than once (run: times)")

    def test_without_the_fence_the_late_write_lands(self):
        # The same without the lock handle on the write: what the test
        # above guards against. The paused leader's write lands on top of
        # its successor's, and run n is done twice.
        prefix, n, w1 = self.freeze_the_leader("--no-fence")
        w1.wait_line(r"run %d: done" % n)
        self.assertEqual(self.runs(prefix)[n].value, b"w1")
        self.assertGreater(self.runs(prefix)[n].version, 1)


if __name__ == "__main__":
    unittest.main()
