"""pytest plugin for etcd3gw's tests (compat/etcd TestPythonEtcd3gw).

etcd3gw 2.0's client defaults to the gateway path /v3alpha/, which etcd 3.4
no longer serves. Its tests build clients with the defaults, so this
points the default at /v3beta/, the path etcd 3.4 serves (and DKV too).
Nothing else changes.
"""
from etcd3gw.client import Etcd3Client

_defaults = list(Etcd3Client.__init__.__defaults__)
assert _defaults[-1] == '/v3alpha/', _defaults
_defaults[-1] = '/v3beta/'
Etcd3Client.__init__.__defaults__ = tuple(_defaults)
