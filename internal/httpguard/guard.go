package httpguard

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// guard keeps web pages from using the HTTP port through a visitor's
// browser (docs/security.md, "Browsers and the HTTP port"). A browser sends requests to any address a page names, with the
// visitor's client certificate attached, and lets the page read answers
// from a host name it controls once that name resolves to the member (DNS
// rebinding). So, on every path but the health probes:
//
//   - the Host header must name this member (one of its own addresses,
//     localhost, a loopback or the connection's own IP) or a name in
//     --http-allowed-hosts: else 421, so a rebound name reads nothing;
//   - a request from another origin (its Origin header, or Sec-Fetch-Site
//     cross-site or same-site) is refused 403 unless the origin is in
//     --cors-allowed-origins, and only those get CORS preflights answered;
//   - a request with a body that changes state must carry a Content-Type
//     a page cannot send to another origin without a preflight: JSON
//     endpoints application/json, the plain-value /v1/keys/ (and pprof) a
//     type other than the three form types, or an X-DKV-Request header.
//     This holds even without an Origin (older browsers, plugins), and
//     with an allowed origin, whose page sends JSON like any client.
//
// Clients that are not browsers (the Go client speaks gRPC; curl, scripts
// and Prometheus send no Origin) see only the last rule.
type guard struct {
	hosts   map[string]bool // lower-case names and IP literals, no port
	anyHost bool            // --http-allowed-hosts '*'
	origins map[string]bool // normalized (normOrigin) allowed origins
	self    string          // "this member", "this proxy"
	next    http.Handler
}

// Config is what the guard allows besides the health probes.
type Config struct {
	// Own are this member's addresses (host:port or host), configured
	// and bound: a Host header naming one of them (or localhost, a
	// loopback or the connection's own IP) is this member.
	Own []string
	// AllowedHosts are further names clients reach the member by
	// (--http-allowed-hosts; "*": any).
	AllowedHosts []string
	// AllowedOrigins are the web origins whose pages may use the port
	// (--cors-allowed-origins), checked by ParseOrigin beforehand.
	AllowedOrigins []string
	// Self names the process in refusals; "" is "this member".
	Self string
}

// New wraps h in the guard against web pages (guard), with c's hosts
// and origins.
func New(c Config, h http.Handler) http.Handler {
	g := &guard{hosts: map[string]bool{"localhost": true}, origins: map[string]bool{}, next: h, self: c.Self}
	if g.self == "" {
		g.self = "this member"
	}
	for _, a := range c.Own {
		if host := HostOnly(a); host != "" {
			if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
				continue // 0.0.0.0 names no address a client can use
			}
			g.hosts[host] = true
		}
	}
	for _, a := range c.AllowedHosts {
		if strings.TrimSpace(a) == "*" {
			g.anyHost = true
		} else if host := HostOnly(a); host != "" {
			g.hosts[host] = true
		}
	}
	for _, o := range c.AllowedOrigins {
		n, _ := ParseOrigin(o) // checked beforehand (server.Config.Validate)
		g.origins[n] = true
	}
	return g
}

// probePath reports the health probes, which answer whoever asks:
// orchestrators probe by IP or by whatever name they use.
func probePath(p string) bool { return p == "/livez" || p == "/readyz" }

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if probePath(r.URL.Path) {
		g.next.ServeHTTP(w, r)
		return
	}
	if !g.hostAllowed(r) {
		http.Error(w, fmt.Sprintf("dkv: Host %q is not an address of %s; if clients reach it by that name, add it to --http-allowed-hosts "+
			"(a guard against DNS rebinding: docs/security.md)", r.Host, g.self), http.StatusMisdirectedRequest)
		return
	}
	origin := r.Header.Get("Origin")
	allowedCross := false
	switch site := r.Header.Get("Sec-Fetch-Site"); {
	case origin != "":
		if g.sameOrigin(r, origin) {
			break
		}
		if n, err := ParseOrigin(origin); err == nil && g.origins[n] {
			allowedCross = true
			break
		}
		http.Error(w, fmt.Sprintf("dkv: a request from origin %q is refused: the HTTP port serves pages of its own origin and of the origins in --cors-allowed-origins only (docs/security.md)", origin), http.StatusForbidden)
		return
	case site == "cross-site" || site == "same-site":
		// No Origin: a GET or HEAD. A top-level navigation (a link to the
		// dashboard) shows the answer to the visitor alone; anything else
		// would hand it to the page that asked.
		if (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.Header.Get("Sec-Fetch-Mode") == "navigate" && r.Header.Get("Sec-Fetch-Dest") == "document" {
			break
		}
		http.Error(w, fmt.Sprintf("dkv: a %s request (Sec-Fetch-Site: %s) is refused: the HTTP port serves pages of its own origin and of the origins in --cors-allowed-origins only (docs/security.md)", site, site), http.StatusForbidden)
		return
	}
	if allowedCross {
		hdr := w.Header()
		hdr.Set("Access-Control-Allow-Origin", origin)
		hdr.Add("Vary", "Origin")
		hdr.Set("Access-Control-Allow-Credentials", "true")
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			hdr.Set("Access-Control-Allow-Methods", "GET, HEAD, POST, PUT, DELETE")
			hdr.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Dkv-Store, X-DKV-Request")
			hdr.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		hdr.Set("Access-Control-Expose-Headers", "X-Dkv-Status, X-Dkv-Revision, X-Dkv-Mod-Revision, X-Dkv-Version")
	}
	if msg := contentTypeRule(r); msg != "" {
		w.Header().Set("X-Dkv-Status", "INVALID_INPUT")
		http.Error(w, msg, http.StatusUnsupportedMediaType)
		return
	}
	g.next.ServeHTTP(w, r)
}

// contentTypeRule says why r may not change state ("" if it may): a
// request with a body must carry a type no page can send to another
// origin without asking first. DELETE carries no body, and browsers
// always ask first before sending one (so do they for PUT and PATCH; the
// rule covers them anyway, so that no write depends on which methods a
// browser deems simple).
func contentTypeRule(r *http.Request) string {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
	default:
		return ""
	}
	ct := r.Header.Get("Content-Type")
	mt, _, _ := mime.ParseMediaType(ct)
	if strings.HasPrefix(r.URL.Path, "/v1/keys/") || strings.HasPrefix(r.URL.Path, "/debug/pprof/") {
		if r.Header.Get("X-DKV-Request") != "" {
			return ""
		}
		switch mt {
		case "", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data":
			return fmt.Sprintf("dkv: %s %s needs a Content-Type other than text/plain, application/x-www-form-urlencoded or multipart/form-data "+
				"(such as application/octet-stream), or an X-DKV-Request header (got Content-Type %q): a web page can send those to any address, so they change nothing (docs/security.md)",
				r.Method, r.URL.Path, ct)
		}
		return ""
	}
	if ct == "" && etcdGatewayPath(r.URL.Path) && !fromBrowser(r) {
		// etcd's gateway takes a body of any type, and etcd clients rely
		// on it: etcd3gw posts its transactions without a Content-Type.
		// A browser marks every request it sends (Origin on every POST,
		// Sec-Fetch-* on every request), so one without any mark and
		// without a type is a program's, not a page's.
		return ""
	}
	if mt != "application/json" {
		return fmt.Sprintf("dkv: %s %s needs Content-Type: application/json (got %q): a web page can send other types to any address, so they change nothing (docs/security.md)",
			r.Method, r.URL.Path, ct)
	}
	return ""
}

// etcdGatewayPath reports etcd's grpc-gateway paths: /v3/ and etcd 3.4's
// /v3beta/.
func etcdGatewayPath(p string) bool {
	return strings.HasPrefix(p, "/v3/") || strings.HasPrefix(p, "/v3beta/")
}

// fromBrowser reports whether r carries a header that browsers add
// and programs do not: Origin (on every POST and cross-origin request) or
// a Sec-Fetch-* fetch metadata header (on every request).
func fromBrowser(r *http.Request) bool {
	if r.Header.Get("Origin") != "" {
		return true
	}
	for k := range r.Header {
		if strings.HasPrefix(k, "Sec-Fetch-") {
			return true
		}
	}
	return false
}

// hostAllowed reports whether r's Host names this member.
func (g *guard) hostAllowed(r *http.Request) bool {
	if g.anyHost {
		return true
	}
	host := HostOnly(r.Host)
	if host == "" {
		return false
	}
	if g.hosts[host] {
		return true
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false
	}
	if ip.IsLoopback() {
		return true
	}
	// The address the client connected to is this member's own.
	la, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	ta, _ := la.(*net.TCPAddr)
	return ta != nil && ta.IP.Equal(ip)
}

// sameOrigin reports whether origin is the origin r was sent to: the
// scheme this port serves and r's Host (already checked to be ours).
func (g *guard) sameOrigin(r *http.Request, origin string) bool {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	n, err := ParseOrigin(origin)
	return err == nil && n == normOrigin(scheme, r.Host)
}

// HostOnly is the lower-case host of a "host:port", "host", "[v6]:port"
// or "[v6]", without the port, brackets or a trailing dot.
func HostOnly(hostport string) string {
	h := strings.TrimSpace(hostport)
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// normOrigin is scheme://host[:port] as browsers serialize an origin:
// lower case, without the scheme's default port.
func normOrigin(scheme, hostport string) string {
	scheme, hostport = strings.ToLower(scheme), strings.ToLower(hostport)
	if host, port, err := net.SplitHostPort(hostport); err == nil {
		if scheme == "http" && port == "80" || scheme == "https" && port == "443" {
			hostport = host
			if strings.Contains(host, ":") {
				hostport = "[" + host + "]"
			}
		}
	}
	return scheme + "://" + hostport
}

// CheckAllowedHost checks one --http-allowed-hosts entry: a host name
// or IP, optionally with :port, or "*".
func CheckAllowedHost(h string) error {
	if h = strings.TrimSpace(h); h == "*" {
		return nil
	}
	if HostOnly(h) == "" || strings.ContainsAny(h, "/@?#* ") {
		return fmt.Errorf("--http-allowed-hosts: %q is not a host name (write a name such as dkv.example.com, optionally with :port, or * for any)", h)
	}
	return nil
}

// ParseOrigin checks a web origin (scheme://host[:port]) and normalizes
// it.
func ParseOrigin(o string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(o))
	if err != nil {
		return "", err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%q is not an origin: it needs the scheme http:// or https://", o)
	}
	if u.Host == "" || u.User != nil || u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", fmt.Errorf("%q is not an origin: write scheme://host[:port] with nothing after it, as a browser's Origin header has it", o)
	}
	if _, port, err := net.SplitHostPort(u.Host); err == nil && port == "" {
		return "", fmt.Errorf("%q is not an origin: empty port", o)
	}
	return normOrigin(u.Scheme, u.Host), nil
}
