"""A reconcile loop: DKV holds the desired state, this process makes the
actual state (its child processes) equal to it.

    python3 reconcile.py &
    curl -X PUT localhost:7863/v1/keys/examples/python/reconcile/desired/web-1 -H 'Content-Type: application/octet-stream' --data-binary v1
    curl -X PUT localhost:7863/v1/keys/examples/python/reconcile/desired/web-1 -H 'Content-Type: application/octet-stream' --data-binary v2
    curl -X DELETE localhost:7863/v1/keys/examples/python/reconcile/desired/web-1

The desired state is one key per service under PREFIX/desired/, its
value the version to run. The actual state is what runs: one child
process per service. reconcile() compares the two and returns the
actions that close the gap (start, stop, update); the loop applies them.

The loop is level-triggered: each round reads the whole desired state and
looks at the processes, whatever woke it. A watch on the desired state
wakes it at once on a change, and it also runs every --resync seconds,
which is how a crashed service is noticed and started again: a crash is
no event in DKV.
"""

import argparse
import signal
import subprocess
import sys
import threading

import dkv


def reconcile(desired, actual):
    """The actions that make actual equal to desired, both {service:
    version}: ("start", service, version) for one that should run and does
    not, ("stop", service, version) for one that runs and should not,
    ("update", service, version) for one that runs another version. In
    service order; none when they are equal."""
    actions = []
    for name in sorted(set(desired) | set(actual)):
        want, have = desired.get(name), actual.get(name)
        if want is None:
            actions.append(("stop", name, have))
        elif have is None:
            actions.append(("start", name, want))
        elif want != have:
            actions.append(("update", name, want))
    return actions


# A stand-in for a real service: it runs until stopped.
SERVICE = "import sys, time\nwhile True: time.sleep(3600)"


class Processes:
    """The actual state: a child process per service, running a version."""

    def __init__(self, say=print):
        self.say = say
        self.procs = {}  # service -> (version, Popen)

    def actual(self):
        """{service: version} of the services running now; one that
        exited is forgotten (and reported)."""
        for name, (version, p) in list(self.procs.items()):
            if p.poll() is not None:
                self.say("%s %s exited (code %d)" % (name, version, p.returncode))
                del self.procs[name]
        return {name: version for name, (version, _) in self.procs.items()}

    def apply(self, action):
        what, name, version = action
        if what in ("stop", "update"):
            _, p = self.procs.pop(name)
            p.terminate()
            p.wait()
        if what in ("start", "update"):
            p = subprocess.Popen([sys.executable, "-c", SERVICE, name, version])
            self.procs[name] = (version, p)
            self.say("%s %s %s (pid %d)" % (what, name, version, p.pid))
        else:
            self.say("%s %s %s" % (what, name, version))

    def stop_all(self):
        for name in sorted(self.procs):
            self.apply(("stop", name, self.procs[name][0]))


class Controller:
    def __init__(self, client, prefix, runner):
        self.client, self.desired, self.runner = client, prefix + "desired/", runner

    def read_desired(self):
        kvs, rev = self.client.list(self.desired)
        return {kv.key[len(self.desired):]: kv.value.decode() for kv in kvs}, rev

    def round(self):
        """One round: read both states, apply reconcile's actions. Returns
        the actions and the revision the desired state was read at."""
        desired, rev = self.read_desired()
        actions = reconcile(desired, self.runner.actual())
        for a in actions:
            self.runner.apply(a)
        return actions, rev

    def run(self, stop, resync=1.0):
        """Rounds until stop is set: after every change of the desired
        state, and every resync seconds."""
        _, rev = self.round()
        changed = threading.Event()

        def watch():
            for _ in self.client.watch(self.desired, rev + 1, stop):
                changed.set()
        threading.Thread(target=watch, daemon=True).start()
        while not stop.is_set():
            changed.wait(resync)
            changed.clear()
            if not stop.is_set():
                self.round()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dkv", help="comma-separated HTTP URLs of DKV members (env DKV_HTTP; default http://127.0.0.1:7863)")
    p.add_argument("--prefix", default="examples/python/reconcile/", help="the desired state is under PREFIX/desired/")
    p.add_argument("--resync", type=float, default=1.0, help="seconds between rounds when nothing changes")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    runner = Processes(say=lambda msg: print(msg, flush=True))
    c = Controller(dkv.Client(dkv.endpoints_from(args.dkv)), args.prefix, runner)
    print("reconciling %sdesired/" % args.prefix, flush=True)
    try:
        c.run(threading.Event(), args.resync)
    except KeyboardInterrupt:
        pass
    finally:
        runner.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
