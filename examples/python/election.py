"""Leader election on a lease, and writes fenced by the leader's term.

    python3 election.py --name w1 &
    python3 election.py --name w2 &
    python3 election.py --name w3 &

Each worker grants itself a lease (a TTL it keeps alive), registers as a
candidate and waits for the election's lock. The one holding it leads and
runs the job: run 1, run 2, ... each recorded under runs/ with a write
that carries its lock handle, so the store applies it only while that
worker still leads. A leader that is paused (SIGSTOP, a long GC, a VM
migration) past its TTL loses the lock to the next worker; when it wakes
up, its late write is refused (423 LOCKED) and it steps down.

The layout is the Go client's (client/concurrency.Election): the lock on
NAME, each candidate's value under NAME/candidates/OWNER on its lease, so
Go and Python workers can stand in one election.
"""

import argparse
import secrets
import signal
import sys
import threading
import time

import dkv


def say(name, msg):
    print("%s: %s" % (name, msg), flush=True)


class KeepAlive(threading.Thread):
    """Keeps lease alive every ttl/3 seconds; sets lost once it has expired
    (or could not be renewed for a whole TTL)."""

    def __init__(self, client, lease, ttl, name):
        super().__init__(daemon=True)
        self.client, self.lease, self.ttl, self.name = client, lease, ttl, name
        self.lost = threading.Event()
        self.stop = threading.Event()

    def run(self):
        renewed = time.monotonic()
        while not self.stop.wait(self.ttl / 3):
            try:
                self.client.lease_keepalive(self.lease)
                renewed = time.monotonic()
            except dkv.LeaseNotFound as e:
                say(self.name, "lost the lease: %s" % e.message)
                break
            except dkv.DkvError as e:
                if time.monotonic() - renewed > self.ttl:
                    say(self.name, "could not renew the lease for its whole TTL: %s" % e)
                    break
        self.lost.set()


class Worker:
    def __init__(self, client, name, prefix, ttl, every, fence=True):
        self.client, self.name, self.ttl, self.every, self.fence = client, name, ttl, every, fence
        self.election = prefix + "leader"
        self.runs = prefix + "runs/"

    def run_forever(self):
        while True:
            try:
                lease = self.client.lease_grant(int(self.ttl * 1000))
            except dkv.Unavailable as e:
                say(self.name, "cannot campaign: %s" % e)  # DKV is unreachable: try again
                continue
            ka = KeepAlive(self.client, lease, self.ttl, self.name)
            ka.start()
            try:
                if self.campaign(lease, ka):
                    self.lead(ka)
            except dkv.DkvError as e:
                say(self.name, "stepping down: %s" % e)
            finally:
                ka.stop.set()
                # Revoking the lease releases the lock, so that the next
                # candidate leads at once, and deletes the candidate key.
                # (A deposed leader's lease is gone already.)
                try:
                    self.client.lease_revoke(lease)
                except dkv.DkvError:
                    pass  # it expires by itself

    def campaign(self, lease, ka):
        """Waits until this worker leads (True), or its lease is lost."""
        owner = "%x-%s" % (lease, secrets.token_hex(8))
        self.client.put("%s/candidates/%s" % (self.election, owner), self.name, lease=lease)
        say(self.name, "campaigning (lease %d)" % lease)
        while not ka.lost.is_set():
            try:
                # Waits in the lock's queue a few seconds at a time, so
                # that a lost lease is noticed; always as the same owner,
                # so that a grant made as one wait ended is not lost.
                self.handle = self.client.lock_acquire(self.election, lease, owner)
            except dkv.LeaseNotFound as e:
                say(self.name, "lost the lease while campaigning: %s" % e.message)
                return False
            if self.handle:
                say(self.name, "leader (term %s)" % self.handle["token"])
                return True
        return False

    def lead(self, ka):
        """Runs the job until this worker is no longer the leader."""
        while True:
            kvs, _ = self.client.list(self.runs, keys_only=True)
            n = int(kvs[-1].key[len(self.runs):]) + 1 if kvs else 1
            say(self.name, "run %d: working" % n)
            time.sleep(self.every)  # the job; a pause here is the fault the fence is for
            key = "%s%06d" % (self.runs, n)
            try:
                self.client.put(key, self.name, lock=self.handle if self.fence else None)
                say(self.name, "run %d: done" % n)
            except dkv.Locked as e:
                say(self.name, "run %d: write REFUSED, no longer the leader: %s" % (n, e.message))
                return
            except dkv.UnknownOutcome:
                kv = self.client.get(key)
                if kv is None or kv.value != self.name.encode():
                    say(self.name, "run %d: the write's outcome is unknown and it is not there; stepping down" % n)
                    return
                say(self.name, "run %d: done" % n)
            # The store refuses a deposed leader's writes whatever this
            # says; looking at the lease only stops the work sooner.
            if ka.lost.is_set():
                say(self.name, "stepping down: the lease is gone")
                return


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dkv", help="comma-separated HTTP URLs of DKV members (env DKV_HTTP; default http://127.0.0.1:7863)")
    p.add_argument("--name", required=True, help="this worker's name")
    p.add_argument("--prefix", default="examples/python/election/", help="key prefix of the election and the runs")
    p.add_argument("--ttl", type=float, default=2.0, help="lease TTL in seconds: how long a paused leader keeps leading")
    p.add_argument("--every", type=float, default=0.3, help="seconds one run of the job takes")
    p.add_argument("--no-fence", action="store_true", help="write without the lock handle (a paused leader's late write lands)")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # unwinds through lead's finally: resigns
    w = Worker(dkv.Client(dkv.endpoints_from(args.dkv)), args.name, args.prefix, args.ttl, args.every,
               fence=not args.no_fence)
    try:
        w.run_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
