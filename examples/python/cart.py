"""A shop's cart, served by any number of stateless instances.

    python3 cart.py --name A --port 8081 &
    python3 cart.py --name B --port 8082 &
    curl -c jar -b jar localhost:8081/cart/items -H 'Content-Type: application/json' -d '{"id":"1","item":"pen"}'
    curl -c jar -b jar localhost:8082/cart

Server keeps nothing in self but its connection to DKV and its name: the
cart is in DKV, read and written back with a compare-and-set on its
mod_revision, so two instances adding to one cart at once both land, and
an instance can be killed between two requests without losing anything.
"""

import argparse
import http.cookies
import http.server
import json
import random
import secrets
import sys
import time

import dkv


class Server:
    """One instance of the shop.

    It must keep nothing in self: a cart kept in the instance's memory is
    seen by the requests that instance answers and by no other, and dies
    with it. Every request reads the cart from DKV.
    """

    def __init__(self, client, prefix, name, cas=True):
        self.dkv = client      # the connection, shared by every request
        self.prefix = prefix   # carts live under it, one key per session
        self.name = name       # says which instance answered
        self.cas = cas         # False: the broken read-modify-write, to see it lose adds

    def cart(self, session):
        kv = self.dkv.get(self.prefix + session)
        return json.loads(kv.value) if kv else []

    def add(self, session, line_id, item):
        """Adds item to the session's cart as the line line_id, once: an
        add sent again (a retry after a lost answer, by the shopper, the
        proxy or this loop) finds its line and changes nothing."""
        key = self.prefix + session
        while True:
            kv = self.dkv.get(key)
            lines = json.loads(kv.value) if kv else []
            if any(line["id"] == line_id for line in lines):
                return lines
            lines.append({"id": line_id, "item": item})
            value = json.dumps(lines)
            try:
                if not self.cas:
                    self.dkv.put(key, value)  # overwrites whatever landed since the get
                elif kv is None:
                    self.dkv.put(key, value, if_absent=True)
                else:
                    self.dkv.put(key, value, if_mod_revision=kv.mod_revision)
                return lines
            except dkv.Conflict:
                # Another request changed the cart since the get: read it
                # again and add to what is there now.
                time.sleep(random.random() * 0.005)
            except dkv.UnknownOutcome:
                pass  # the next get shows whether the line landed

    def handle(self, method, path, cookie_header, body):
        """Answers one request: (status, extra headers, JSON answer)."""
        cookies = http.cookies.SimpleCookie(cookie_header or "")
        session = cookies["sid"].value if "sid" in cookies else None
        headers = {}
        if method == "GET" and path == "/cart":
            lines = self.cart(session) if session else []
        elif method == "POST" and path == "/cart/items":
            req = json.loads(body or b"{}")
            if not isinstance(req.get("item"), str) or not req["item"]:
                return 400, {}, {"error": 'the body needs "item" (and "id", to make a retry safe)'}
            if not session:
                session = secrets.token_hex(16)
                headers["Set-Cookie"] = "sid=%s; Path=/; HttpOnly" % session
            lines = self.add(session, str(req.get("id") or secrets.token_hex(8)), req["item"])
        else:
            return 404, {}, {"error": "GET /cart or POST /cart/items"}
        return 200, headers, {"instance": self.name, "items": lines}


def serve(server, port, host="127.0.0.1"):
    """An HTTP server for server on port (0: any free one), one thread per
    request."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self):
            n = int(self.headers.get("Content-Length") or 0)
            try:
                status, headers, answer = server.handle(self.command, self.path, self.headers.get("Cookie"),
                                                        self.rfile.read(n))
            except dkv.DkvError as e:
                status, headers, answer = 503, {}, {"error": str(e)}
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer((host, port), Handler)
    httpd.daemon_threads = True
    return httpd


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dkv", help="comma-separated HTTP URLs of DKV members (env DKV_HTTP; default http://127.0.0.1:7863)")
    p.add_argument("--name", default="A", help="the instance's name, in every answer")
    p.add_argument("--port", type=int, default=8081, help="port to serve on (0: any free one)")
    p.add_argument("--prefix", default="examples/python/cart/", help="key prefix of the carts")
    p.add_argument("--no-cas", action="store_true", help="write the cart back without the compare-and-set (loses adds)")
    args = p.parse_args()
    server = Server(dkv.Client(dkv.endpoints_from(args.dkv)), args.prefix, args.name, cas=not args.no_cas)
    httpd = serve(server, args.port)
    print("%s listening on http://127.0.0.1:%d" % (args.name, httpd.server_address[1]), flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
