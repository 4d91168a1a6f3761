"""A small client for DKV's HTTP/JSON API, on the standard library only.

It covers what the examples here use: keys (get, list, put, delete),
leases, locks and one watch. docs/http.md describes the API; this file is
the part to copy into a service.

Three things the API asks of a client, and how they are done here:

- Keys and values are base64 in the JSON, 64-bit integers are strings:
  KV turns them back into bytes and ints.
- A refused call is an HTTP status with the DKV status in the body
  (details[0].reason): it is raised as DkvError, or as the subclass for
  the statuses a program handles (Conflict, Locked, LeaseNotFound).
- Any member answers any call. A member that cannot be reached, or
  answers 503 (no leader, stopping), is skipped for the next one. A write
  whose connection broke after it was sent may or may not have been
  applied: it is not sent again behind the caller's back but raised as
  UnknownOutcome, so the caller can find out and decide.
"""

import base64
import http.client
import json
import os
import socket
import threading
import time
import urllib.parse

__all__ = ["Client", "KV", "DkvError", "Conflict", "Locked", "LeaseNotFound",
           "Unavailable", "UnknownOutcome", "endpoints_from"]


def endpoints_from(arg=None):
    """The HTTP base URLs to use: arg (comma-separated), else $DKV_HTTP,
    else a local `dkv serve`."""
    s = arg or os.environ.get("DKV_HTTP") or "http://127.0.0.1:7863"
    return [e.strip() for e in s.split(",") if e.strip()]


class DkvError(Exception):
    """A call DKV refused: http_status, reason (the DKV status, such as
    "CONFLICT") and the server's message."""

    def __init__(self, http_status, reason, message):
        super().__init__("%s (%d %s)" % (message, http_status, reason))
        self.http_status, self.reason, self.message = http_status, reason, message


class Conflict(DkvError):
    """A condition failed: if_absent, if_version, if_mod_revision."""


class Locked(DkvError):
    """The key is locked by someone else, or the write's lock handle (its
    fence) is no longer current."""


class LeaseNotFound(DkvError):
    """The lease expired, was revoked or never existed."""


class Unavailable(DkvError):
    """No member could serve the call before the client gave up."""


class UnknownOutcome(Exception):
    """A write was sent and its answer lost: it may or may not have been
    applied."""


_by_reason = {"CONFLICT": Conflict, "LOCKED": Locked, "LEASE_NOT_FOUND": LeaseNotFound}


def b64(s):
    if isinstance(s, str):
        s = s.encode()
    return base64.b64encode(s).decode()


class KV:
    """One key as read: key (str), value (bytes), and its revisions."""

    def __init__(self, j):
        self.key = base64.b64decode(j.get("key", "")).decode()
        self.value = base64.b64decode(j.get("value", ""))
        self.mod_revision = int(j.get("mod_revision", 0))
        self.create_revision = int(j.get("create_revision", 0))
        self.version = int(j.get("version", 0))
        self.lease = int(j.get("lease", 0))

    def __repr__(self):
        return "KV(%r, %r, mod_revision=%d, version=%d)" % (self.key, self.value, self.mod_revision, self.version)


class Client:
    """A client of the members at endpoints (HTTP base URLs).

    timeout is how long one call waits for its answer; retry_for is how
    long a call keeps trying other members while none can serve it.
    """

    def __init__(self, endpoints, timeout=10.0, retry_for=15.0):
        if isinstance(endpoints, str):
            endpoints = endpoints_from(endpoints)
        self.endpoints = [urllib.parse.urlsplit(e if "://" in e else "http://" + e) for e in endpoints]
        self.timeout, self.retry_for = timeout, retry_for
        self._mu = threading.Lock()
        self._first = 0  # the member that answered last: tried first

    # -- the transport --------------------------------------------------

    def call(self, path, body=None, method="POST", idempotent=False, timeout=None, retry_for=None):
        """Sends one call and returns its decoded JSON answer."""
        data = None if body is None else json.dumps(body).encode()
        deadline = time.monotonic() + (self.retry_for if retry_for is None else retry_for)
        pause, attempt, last = 0.05, 0, None
        with self._mu:
            first = self._first
        while True:
            i = (first + attempt) % len(self.endpoints)
            ep = self.endpoints[i]
            attempt += 1
            conn = http.client.HTTPConnection(ep.hostname, ep.port or 80, timeout=timeout or self.timeout)
            try:
                try:
                    conn.connect()
                except OSError as e:
                    last = "%s: %s" % (ep.netloc, e)  # nothing was sent: another member may serve it
                else:
                    try:
                        headers = {"Content-Type": "application/json"} if data is not None else {}
                        conn.request(method, path, body=data, headers=headers)
                        resp = conn.getresponse()
                        raw = resp.read()
                    except (OSError, http.client.HTTPException) as e:
                        if not idempotent:
                            raise UnknownOutcome("%s %s on %s: %s" % (method, path, ep.netloc, e))
                        last = "%s: %s" % (ep.netloc, e)
                    else:
                        if resp.status == 200:
                            with self._mu:
                                self._first = i
                            return json.loads(raw or b"{}")
                        err = _error(resp.status, raw)
                        if resp.status != 503:
                            raise err
                        last = str(err)  # no leader, or stopping: refused, so safe to send again
            finally:
                conn.close()
            if time.monotonic() > deadline:
                raise Unavailable(503, "UNAVAILABLE", "no member could serve %s: %s" % (path, last))
            if attempt % len(self.endpoints) == 0:
                time.sleep(pause)
                pause = min(pause * 2, 0.5)

    # -- keys -----------------------------------------------------------

    def get(self, key, lock=None):
        """The key, or None if it does not exist."""
        body = {"key": b64(key)}
        if lock:
            body["lock"] = lock
        kvs = self.call("/v1/kv/range", body, idempotent=True).get("kvs", [])
        return KV(kvs[0]) if kvs else None

    def list(self, prefix, keys_only=False):
        """Every key under prefix, in key order."""
        r = self.call("/v1/kv/range", {"key": b64(prefix), "prefix": True, "keys_only": keys_only}, idempotent=True)
        return [KV(j) for j in r.get("kvs", [])], int(r["header"]["revision"])

    def put(self, key, value, if_absent=False, if_mod_revision=0, lease=0, lock=None):
        """Writes key; returns the write's revision. if_absent and
        if_mod_revision make it a compare-and-set (Conflict if it does not
        hold); lock is a lock handle: the write applies only while that
        handle is current (Locked otherwise)."""
        body = {"key": b64(key), "value": b64(value)}
        if if_absent:
            body["if_absent"] = True
        if if_mod_revision:
            body["if_mod_revision"] = str(if_mod_revision)
        if lease:
            body["lease"] = str(lease)
        if lock:
            body["lock"] = lock
        return int(self.call("/v1/kv/put", body)["header"]["revision"])

    def delete(self, key, prefix=False, lock=None):
        body = {"key": b64(key), "prefix": prefix}
        if lock:
            body["lock"] = lock
        return int(self.call("/v1/kv/deleterange", body).get("deleted", 0))

    # -- leases and locks -----------------------------------------------

    def lease_grant(self, ttl_ms):
        return int(self.call("/v1/lease/grant", {"ttl_ms": str(ttl_ms)})["id"])

    def lease_keepalive(self, lease):
        """Renews lease for its TTL; LeaseNotFound once it has expired."""
        return int(self.call("/v1/lease/keepalive", {"id": str(lease)}, idempotent=True)["ttl_ms"])

    def lease_revoke(self, lease):
        """Ends lease now: its keys are deleted and its locks released."""
        try:
            self.call("/v1/lease/revoke", {"id": str(lease)}, idempotent=True)
        except LeaseNotFound:
            pass

    def lock_acquire(self, key, lease, owner, wait_for=5.0):
        """Waits in key's queue until granted and returns the handle, or
        None if not granted within about wait_for seconds (the wait then
        leaves the queue). Call it again with the same owner: if the lock
        was granted as the last call ended, it returns that grant."""
        try:
            r = self.call("/v1/lock/acquire", {"key": b64(key), "lease": str(lease), "owner": owner, "wait": True},
                          idempotent=True, timeout=wait_for, retry_for=wait_for)
        except Unavailable:
            return None
        return r["handle"]

    def lock_describe(self, key):
        return self.call("/v1/lock/describe", {"key": b64(key)}, idempotent=True)

    # -- watch ----------------------------------------------------------

    def watch(self, prefix, start_revision, stop):
        """Yields the events under prefix from start_revision on (each a
        dict: "type" PUT or DELETE, "kv" a KV) until stop (a
        threading.Event) is set. A broken or idle stream is opened again,
        on the next member if need be, after the last event yielded: no
        event is lost or repeated."""
        rev, i = start_revision, 0
        while not stop.is_set():
            ep = self.endpoints[i % len(self.endpoints)]
            q = urllib.parse.urlencode({"key": prefix, "prefix": "true", "rev": rev})
            # A read that times out spoils the response, so the stream is
            # reopened each second it is idle: that is also how often stop
            # is looked at.
            conn = http.client.HTTPConnection(ep.hostname, ep.port or 80, timeout=1.0)
            try:
                conn.request("GET", "/v1/watch?" + q)
                resp = conn.getresponse()
                if resp.status != 200:
                    err = _error(resp.status, resp.read())
                    if resp.status != 503:
                        raise err
                    i += 1
                    continue
                while not stop.is_set():
                    line = resp.readline()
                    if not line:
                        break
                    for ev in json.loads(line).get("events", []):
                        kv = KV(ev["kv"])
                        rev = kv.mod_revision + 1
                        yield {"type": ev.get("type", "PUT"), "kv": kv}
            except socket.timeout:  # TimeoutError since Python 3.10
                pass
            except (OSError, http.client.HTTPException):
                i += 1  # this member is gone or stopping: the next one
                stop.wait(0.1)
            finally:
                conn.close()


def _error(status, raw):
    try:
        j = json.loads(raw)
        message = j.get("message", "")
        details = j.get("details") or [{}]
        reason = details[0].get("reason", "")
    except ValueError:
        message, reason = raw.decode(errors="replace").strip(), ""
    return _by_reason.get(reason, DkvError)(status, reason or "HTTP_%d" % status, message)
