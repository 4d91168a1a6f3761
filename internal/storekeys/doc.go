// Package storekeys maps the keys of a named store to the physical keys
// of the one MVCC keyspace, and back. It is the only place that knows the
// layout; the server calls it on every request that names a key and on
// every reply that returns one, so a client can never name a key of a
// store other than the one its call carries.
//
// Layout: the default store (name "") owns [\x00, Reserved). A named
// store S owns Reserved + S + "/" + k for each of its keys k. Store names
// match [a-z0-9][a-z0-9._-]{0,62} and contain no "/", so no store's prefix
// is a prefix of another's, and none is reachable from the default store:
// a default-store key at or after Reserved is refused, and a default-store
// range end past Reserved (or "\x00", to the end) is clipped to Reserved.
package storekeys
