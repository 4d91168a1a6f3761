"""The reconcile loop's guarantee: each round does exactly the actions
that make the actual state the desired state, each once, and nothing when
they are equal; a crashed service is started again."""

import os
import signal
import unittest

import dkv
from proc import Proc, dkv_endpoints, fresh_prefix
from reconcile import Controller, Processes, reconcile


class ReconcileFunctionTest(unittest.TestCase):
    def test_actions(self):
        for desired, actual, want in [
            ({}, {}, []),
            ({"web-1": "v1"}, {}, [("start", "web-1", "v1")]),
            ({}, {"web-1": "v1"}, [("stop", "web-1", "v1")]),
            ({"web-1": "v2"}, {"web-1": "v1"}, [("update", "web-1", "v2")]),
            ({"web-1": "v2"}, {"web-1": "v2"}, []),
            # The Go example's first round (examples/reconcile).
            ({"web-1": "v2", "web-2": "v2", "web-3": "v2"}, {"alt-1": "v1", "web-1": "v1", "web-2": "v2"},
             [("stop", "alt-1", "v1"), ("update", "web-1", "v2"), ("start", "web-3", "v2")]),
        ]:
            self.assertEqual(reconcile(desired, actual), want, "desired %s, actual %s" % (desired, actual))


class ControllerTest(unittest.TestCase):
    """Rounds of the controller, in this process, on DKV's desired state
    and real child processes."""

    def setUp(self):
        self.client = dkv.Client(dkv_endpoints())
        self.prefix = fresh_prefix("reconcile")
        self.said = []
        self.runner = Processes(say=self.said.append)
        self.ctl = Controller(self.client, self.prefix, self.runner)

    def tearDown(self):
        self.runner.stop_all()

    def desire(self, **services):
        for name, version in services.items():
            key = self.prefix + "desired/" + name.replace("_", "-")
            if version is None:
                self.client.delete(key)
            else:
                self.client.put(key, version)

    def running(self):
        return {name: v for name, (v, p) in self.runner.procs.items() if p.poll() is None}

    def test_rounds(self):
        self.desire(web_1="v1", web_2="v1")
        self.assertEqual(self.ctl.round()[0], [("start", "web-1", "v1"), ("start", "web-2", "v1")])
        self.assertEqual(self.running(), {"web-1": "v1", "web-2": "v1"})
        self.assertEqual(self.ctl.round()[0], [], "a round with nothing changed acts")

        web_2 = self.runner.procs["web-2"][1]
        self.desire(web_1="v2", web_2=None, web_3="v1")
        self.assertEqual(self.ctl.round()[0],
                         [("update", "web-1", "v2"), ("stop", "web-2", "v1"), ("start", "web-3", "v1")])
        self.assertEqual(self.running(), {"web-1": "v2", "web-3": "v1"})
        self.assertIsNotNone(web_2.poll(), "web-2's process still runs after its stop")
        self.assertEqual(self.ctl.round()[0], [])

        # web-3 crashes: the next round starts it again, and only it.
        self.runner.procs["web-3"][1].kill()
        self.runner.procs["web-3"][1].wait()
        self.assertEqual(self.ctl.round()[0], [("start", "web-3", "v1")])
        self.assertIn("web-3 v1 exited (code -9)", self.said)
        self.assertEqual(self.running(), {"web-1": "v2", "web-3": "v1"})


class ProgramTest(unittest.TestCase):
    """reconcile.py as a process: driven by the watch, and by its resync
    for a crash."""

    def test_watch_and_crash(self):
        client = dkv.Client(dkv_endpoints())
        prefix = fresh_prefix("reconcile")
        ctl = Proc("reconcile.py", "--dkv", dkv_endpoints(), "--prefix", prefix, "--resync", 0.5)
        try:
            ctl.wait_line(r"^reconciling ")
            client.put(prefix + "desired/web-1", "v1")
            pid = int(ctl.wait_line(r"^start web-1 v1 \(pid (\d+)\)").group(1))
            client.put(prefix + "desired/web-1", "v2")
            ctl.wait_line(r"^update web-1 v2 \(pid \d+\)")
            client.put(prefix + "desired/web-2", "v1")
            pid = int(ctl.wait_line(r"^start web-2 v1 \(pid (\d+)\)").group(1))
            os.kill(pid, signal.SIGKILL)  # web-2 crashes: no change in DKV
            ctl.wait_line(r"^web-2 v1 exited \(code -9\)")
            ctl.wait_line(r"^start web-2 v1 \(pid \d+\)")
            client.delete(prefix + "desired/web-1")
            ctl.wait_line(r"^stop web-1 v2")
        finally:
            self.assertEqual(ctl.stop(), 0)
        self.assertIn("stop web-2 v1", ctl.lines, "the controller left web-2 running at exit")
        actions = [line for line in ctl.lines if line.split(" ")[0] in ("start", "stop", "update")]
        self.assertEqual([" ".join(a.split(" ")[:3]) for a in actions],
                         ["start web-1 v1", "update web-1 v2", "start web-2 v1", "start web-2 v1", "stop web-1 v2",
                          "stop web-2 v1"], "each action once, in order")


if __name__ == "__main__":
    unittest.main()
