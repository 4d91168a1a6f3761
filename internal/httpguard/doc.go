// Package httpguard keeps web pages from using a DKV HTTP port through a
// visitor's browser: DNS rebinding (a Host header that names no address
// of the process gets 421), cross-origin requests and state changes a
// page could send without a CORS preflight. The member's HTTP port
// (server/httpapi.Guard) and dkv proxy's metrics port both wrap their
// handlers in it, outermost, so that both refuse the same requests the
// same way.
//
// It imports only the standard library: the proxy, which links no
// server package, uses it too (TestLayering).
package httpguard
