package tests

import (
	"context"
	"crypto/tls"
	"net"
	"path/filepath"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/tlsutil"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// issueTo makes a certificate named cn for host, signed by ca, writes it
// to dir and returns the files.
func issueTo(t *testing.T, ca *tlsutil.CA, dir, cn string, hosts ...string) (certFile, keyFile string) {
	t.Helper()
	c, err := ca.Issue(cn, hosts, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, cn+".crt"), filepath.Join(dir, cn+".key")
	if err := c.WriteFiles(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestPeerTLSRefusesNonMembers runs a 3-member cluster with mutual TLS
// on the peer port (member certificates named n1..n3, only those names
// allowed). Raft traffic between the members flows over it both ways (a
// leader is elected and a write commits). A process that knows the
// cluster's peer secret, and so passes the HMAC handshake, but holds no
// member certificate — plaintext, TLS without a certificate, a
// certificate of another CA, or one of the cluster's CA with a name not
// allowed — can deliver neither a raft message nor a snapshot: every
// stream is refused and every member's term, log and state are as they
// were.
func TestPeerTLSRefusesNonMembers(t *testing.T) {
	ca, err := tlsutil.NewCA("cluster ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pki := t.TempDir()
	caFile := filepath.Join(pki, "ca.crt")
	if err := ca.WriteCert(caFile); err != nil {
		t.Fatal(err)
	}
	c := servertest.NewClusterEach(t, 3, server.Config{}, func(nd *servertest.Node) {
		host, _, _ := net.SplitHostPort(nd.PeerAddr)
		cert, key := issueTo(t, ca, pki, nd.Name, host)
		nd.Cfg.PeerTLS = server.TLSFiles{CertFile: cert, KeyFile: key, TrustedCAFile: caFile, AllowedNames: []string{"n1", "n2", "n3"}}
	})
	c.WaitConverged()
	ctx := context.Background()
	if _, err := c.WaitLeader().KV.Put(ctx, &dkvpb.PutRequest{Key: []byte("real"), Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	c.WaitConverged()
	before := idleViews(t, c)
	st, err := c.Nodes[0].Cluster.Status(ctx, &dkvpb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}

	other, err := tlsutil.NewCA("other ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair := func(ca *tlsutil.CA, cn string) []tls.Certificate {
		c, err := ca.Issue(cn, nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		p, err := c.TLS()
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{p}
	}
	tlsAs := func(certs []tls.Certificate) credentials.TransportCredentials {
		// The forger trusts the cluster's CA: only its own certificate
		// is missing or wrong.
		return credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), Certificates: certs})
	}
	attackers := []struct {
		what  string
		creds credentials.TransportCredentials
	}{
		{"plaintext", insecure.NewCredentials()},
		{"TLS without a certificate", tlsAs(nil)},
		{"a certificate of another CA named n1", tlsAs(pair(other, "n1"))},
		{"a certificate of the cluster's CA with a name not allowed", tlsAs(pair(ca, "intruder"))},
	}
	for _, a := range attackers {
		f := &forger{t: t, cluster: st.GetHeader().GetClusterId(), creds: a.creds}
		for _, to := range c.Nodes {
			// The forger speaks for member from, whose secret it has.
			from := c.Nodes[0]
			if to == from {
				from = c.Nodes[1]
			}
			md := handshake(from.ID(), peerProof(peerSecretOf(t, to), f.cluster, from.ID(), to.ID()))
			ms := forgedMessages(before[to.Name], from.ID(), to)
			for _, m := range ms[:2] {
				if err := f.messages(to.PeerAddr, md, from.ID(), to.ID(), m); err == nil {
					t.Errorf("%s: %v to %s was accepted", a.what, m.GetType(), to.Name)
				}
			}
			if err := f.snapshot(to.PeerAddr, md, from.ID(), to.ID(), ms[2]); err == nil {
				t.Errorf("%s: snapshot to %s was accepted", a.what, to.Name)
			}
		}
	}
	onlyOneWriteSince(t, c, before)
}

// TestSecureClusterJoinAndForward runs a cluster with TLS everywhere —
// client certificates required on the client port, mutual TLS on the
// peer port — and checks the paths where members dial each other's
// client ports: a new member joins through a follower, and a membership
// call sent to a follower is forwarded to the leader. Both present the
// member's own certificate.
func TestSecureClusterJoinAndForward(t *testing.T) {
	ca, err := tlsutil.NewCA("cluster ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pki := t.TempDir()
	caFile := filepath.Join(pki, "ca.crt")
	if err := ca.WriteCert(caFile); err != nil {
		t.Fatal(err)
	}
	admin, err := ca.Issue("admin", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	adminPair, err := admin.TLS()
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"n1", "n2", "n3", "n4"}
	c := servertest.NewClusterEach(t, 3, server.Config{}, func(nd *servertest.Node) {
		ch, _, _ := net.SplitHostPort(nd.Cfg.ClientAddr)
		ph, _, _ := net.SplitHostPort(nd.PeerAddr)
		cert, key := issueTo(t, ca, pki, nd.Name, ch, ph)
		nd.Cfg.ClientTLS = server.TLSFiles{CertFile: cert, KeyFile: key, TrustedCAFile: caFile, ClientCertAuth: true}
		nd.Cfg.PeerTLS = server.TLSFiles{CertFile: cert, KeyFile: key, TrustedCAFile: caFile, AllowedNames: names}
		nd.ClientTLS = &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{adminPair}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.WaitLeader().KV.Put(ctx, &dkvpb.PutRequest{Key: []byte("k"), Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	follower := c.Followers()[0]
	n4 := c.Add("n4", []string{follower.Srv.ClientAddr()})
	c.Eventually(30*time.Second, "n4 promoted through a follower", func() bool {
		f := c.Followers()[0]
		_, err := f.Cluster.MemberPromote(ctx, &dkvpb.MemberPromoteRequest{Name: "n4"})
		if err != nil {
			t.Logf("promote via %s: %v", f.Name, err)
		}
		return err == nil
	})
	c.Eventually(30*time.Second, "n4 serves the key", func() bool {
		r, err := n4.KV.Range(ctx, &dkvpb.RangeRequest{Key: []byte("k")})
		return err == nil && len(r.GetKvs()) == 1
	})
	ml, err := n4.Cluster.MemberList(ctx, &dkvpb.MemberListRequest{Linearizable: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ml.GetMembers() {
		if m.GetIsLearner() {
			t.Errorf("%s is still a learner", m.GetName())
		}
	}
}
