"""The etcd3gw calls and paths its own tests leave out (compat/etcd TestPythonEtcd3gw).

Run against a member at localhost:2379, with the client's default gateway
path set to /v3beta/ by the dkvcompat_etcd3gw plugin.
"""
import uuid

import pytest

from etcd3gw import exceptions
from etcd3gw.client import Etcd3Client
from etcd3gw.utils import _encode


@pytest.fixture
def client():
    return Etcd3Client()


@pytest.fixture
def prefix():
    return '/more/' + uuid.uuid4().hex + '/'


def test_transaction(client, prefix):
    key = prefix + 'txn'
    client.put(key, 'v1')
    txn = {
        'compare': [{'key': _encode(key), 'result': 'EQUAL', 'target': 'VALUE', 'value': _encode('v1')}],
        'success': [{'request_put': {'key': _encode(key), 'value': _encode('v2')}},
                    {'request_range': {'key': _encode(key)}}],
        'failure': [{'request_range': {'key': _encode(key)}}],
    }
    result = client.transaction(txn)
    assert result['succeeded'] is True
    assert len(result['responses']) == 2
    assert client.get(key) == [b'v2']
    # The same compare now fails: the failure branch's range is answered.
    result = client.transaction(txn)
    assert result.get('succeeded', False) is False
    kvs = result['responses'][0]['response_range']['kvs']
    assert [kv['value'] for kv in kvs] == [_encode('v2')]


def test_lock_as_context_manager(client, prefix):
    name = prefix.strip('/').replace('/', '-')
    with client.lock(name, ttl=30) as lock:
        assert lock.is_acquired()
        other = client.lock(name, ttl=30)
        assert other.acquire() is False
        other.lease.revoke()
    assert not lock.is_acquired()
    lock.lease.revoke()


def test_watch_once_times_out(client, prefix):
    with pytest.raises(exceptions.WatchTimedOut):
        client.watch_once(prefix + 'quiet', timeout=1)


def test_get_with_metadata_sorted_by_version(client, prefix):
    client.put(prefix + 'a', '1')
    client.put(prefix + 'b', '1')
    client.put(prefix + 'b', '2')
    got = client.get_prefix(prefix, sort_order='descend', sort_target='version')
    assert [meta['key'] for _, meta in got] == [(prefix + 'b').encode(), (prefix + 'a').encode()]
    assert client.delete_prefix(prefix) is True
    assert client.get_prefix(prefix) == []


def test_delete_missing_key(client, prefix):
    # etcd omits "deleted" when it is 0, so etcd3gw reports False.
    assert client.delete(prefix + 'missing') is False


def test_v3_path(prefix):
    # etcd 3.4 serves the gateway under /v3/ as well as /v3beta/.
    c = Etcd3Client(api_path='/v3/')
    assert 'version' in c.status()
    assert c.put(prefix + 'v3', 'x') is True
    assert c.get(prefix + 'v3') == [b'x']
    lease = c.lease(30)
    assert lease.ttl() > 0
    assert lease.revoke() is True


def test_unknown_lease_is_an_error(client):
    # Keys on a lease that does not exist: etcd answers an error status.
    with pytest.raises(exceptions.Etcd3Exception):
        client.post(client.get_url('/kv/put'),
                    json={'key': _encode('/more/nolease'), 'value': _encode('x'), 'lease': 1234567})
