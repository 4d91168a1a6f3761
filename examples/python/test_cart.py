"""The cart's guarantee: whichever instance answers, no add is lost."""

import concurrent.futures
import http.client
import json
import threading
import unittest

import dkv
from cart import Server
from proc import Proc, dkv_endpoints, fresh_prefix


def request(base, method, path, body=None, session="sid=shopper-1"):
    host, port = base.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        headers = {"Cookie": session}
        if body is not None:
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise AssertionError("%s %s on %s: %d %s" % (method, path, base, resp.status, data))
        return json.loads(data)
    finally:
        conn.close()


def start(name, prefix, *flags):
    p = Proc("cart.py", "--dkv", dkv_endpoints(), "--name", name, "--port", 0, "--prefix", prefix, *flags)
    base = p.wait_line(r"listening on (http://\S+)").group(1)
    return p, base


def add_all(bases, ids, workers=20, on_done=None):
    """Adds one line per id to the shopper's cart, workers at a time,
    spread round-robin over the instances in bases. An add whose instance
    died is sent again to the next one, with the same id, which is safe.
    Returns how many were sent again."""
    again, done, mu = [], [0], threading.Lock()

    def add(n, line_id):
        for attempt in range(len(bases) * 3):
            base = bases[(n + attempt) % len(bases)]
            try:
                request(base, "POST", "/cart/items", {"id": line_id, "item": "pen"})
                break
            except (OSError, http.client.HTTPException):
                again.append(line_id)  # that instance is gone: the next
        else:
            raise AssertionError("add %s: no instance answered" % line_id)
        with mu:
            done[0] += 1
            count = done[0]
        if on_done:
            on_done(count)

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for f in [pool.submit(add, n, i) for n, i in enumerate(ids)]:
            f.result()
    return len(again)


class CartTest(unittest.TestCase):
    def setUp(self):
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            p.stop()

    def start(self, name, prefix, *flags):
        p, base = start(name, prefix, *flags)
        self.procs.append(p)
        return p, base

    def test_two_instances_lose_no_add_even_when_one_is_killed(self):
        prefix = fresh_prefix("cart")
        a, base_a = self.start("A", prefix)
        b, base_b = self.start("B", prefix)
        self.assertEqual(request(base_a, "POST", "/cart/items", {"id": "first", "item": "book"})["instance"], "A")
        self.assertEqual(request(base_b, "GET", "/cart")["items"], [{"id": "first", "item": "book"}],
                         "B sees the cart A wrote")

        bases = [base_a, base_b]
        ids = ["pen-%03d" % n for n in range(100)]

        def on_done(count):
            if count == 50:
                b.kill()  # a crash in the middle: B's requests in flight fail
        again = add_all(bases, ids, on_done=on_done)
        self.assertIsNotNone(b.p.poll(), "B was killed")
        print("\nB killed after 50 adds; %d adds that found it dead were sent again to A" % again)

        _, base_b2 = self.start("B2", prefix)  # a fresh process in B's place
        for base in (base_a, base_b2):
            got = request(base, "GET", "/cart")
            line_ids = [line["id"] for line in got["items"]]
            self.assertEqual(len(line_ids), len(set(line_ids)), "a line twice in the cart from %s" % got["instance"])
            lost = sorted(set(ids) - set(line_ids))
            self.assertEqual(lost, [], "%s shows a cart without %d of the 100 adds" % (got["instance"], len(lost)))
            self.assertEqual(len(line_ids), 101)

    def test_without_the_compare_and_set_adds_are_lost(self):
        # The instances as they would be without the compare-and-set: a
        # read-modify-write whose write overwrites whatever another
        # request wrote since its read. This is what the test above
        # guards against; here it must lose adds, or the test above
        # would prove nothing.
        prefix = fresh_prefix("cart-no-cas")
        _, base_a = self.start("A", prefix, "--no-cas")
        _, base_b = self.start("B", prefix, "--no-cas")
        ids = ["pen-%03d" % n for n in range(100)]
        add_all([base_a, base_b], ids)
        kept = len(request(base_a, "GET", "/cart")["items"])
        self.assertLess(kept, 100, "100 concurrent read-modify-writes without a compare-and-set lost nothing")
        print("\nwithout the compare-and-set, the cart kept %d of 100 adds" % kept)


class ServerKeepsNothingTest(unittest.TestCase):
    def test_nothing_in_self(self):
        client = dkv.Client(dkv_endpoints())
        prefix = fresh_prefix("server")
        s1, s2 = Server(client, prefix, "A"), Server(client, prefix, "B")
        before = dict(vars(s1))
        s1.handle("POST", "/cart/items", "sid=s", b'{"id":"1","item":"book"}')
        s2.handle("POST", "/cart/items", "sid=s", b'{"id":"2","item":"pen"}')
        self.assertEqual(vars(s1), before, "the request changed the instance: it keeps state in self")
        # A new instance, as after a deploy, knows the cart: it was never
        # in the instance.
        status, _, got = Server(client, prefix, "C").handle("GET", "/cart", "sid=s", b"")
        self.assertEqual(status, 200)
        self.assertEqual([line["item"] for line in got["items"]], ["book", "pen"])

    def test_add_sent_twice_lands_once(self):
        s = Server(dkv.Client(dkv_endpoints()), fresh_prefix("server"), "A")
        s.add("s", "42", "book")
        s.add("s", "42", "book")  # the same add again: a retry after a lost answer
        self.assertEqual(s.cart("s"), [{"id": "42", "item": "book"}])


if __name__ == "__main__":
    unittest.main()
