// Package etcdcompat is the etcd-API conformance suite: it drives a target
// cluster, either Debian's etcd or a 3-node DKV, through etcd's own clients
// (etcdctl 3.4 and Go's clientv3) and checks that they behave as they do
// against etcd. See README.md.
//
// The package has only tests; it is a module of its own so that DKV's main
// module never depends on etcd's client.
package etcdcompat
