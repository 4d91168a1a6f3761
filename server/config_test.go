package server

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

func TestConfigLeaseMaxClockDrift(t *testing.T) {
	var cfg Config
	cfg.EnsureDefaults()
	if cfg.LeaseMaxClockDrift != DefaultLeaseMaxClockDrift || cfg.Validate() != nil {
		t.Fatalf("default drift %v (%v), want %v and valid", cfg.LeaseMaxClockDrift, cfg.Validate(), DefaultLeaseMaxClockDrift)
	}
	for _, d := range []float64{-1, 0.2, 0.4999} {
		cfg.LeaseMaxClockDrift = d
		if err := cfg.Validate(); err != nil {
			t.Errorf("drift %v refused: %v", d, err)
		}
	}
	for _, d := range []float64{0.5, 2, math.NaN(), math.Inf(1)} {
		cfg.LeaseMaxClockDrift = d
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "must be below 0.5") {
			t.Errorf("drift %v: err = %v, want one naming the 0.5 limit", d, err)
		}
	}
}

func TestConfigInitialClusterChecks(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Name: "n1", PeerAddr: "127.0.0.1:7862", InitialCluster: "n2=127.0.0.1:7862"}, `does not contain this member's name "n1"`},
		{Config{Name: "n1", PeerAddr: "127.0.0.1:7862", InitialCluster: "n1"}, `entry "n1" is not name=host:port`},
		{Config{Name: "n1", PeerAddr: "127.0.0.1:7862", InitialCluster: "n1=nohost"}, `peer address "nohost" is not host:port`},
		{Config{Name: "n1", PeerAddr: "0.0.0.0:7862", InitialCluster: "n1=n1:7862,n2=n2:7862"},
			"this member's entry in --initial-cluster is n1=n1:7862, but it advertises peer address 0.0.0.0:7862"},
		{Config{Name: "n1", PeerAddr: "0.0.0.0:7862", AdvertisePeerAddr: "n1:7862", InitialCluster: "n1=n1:7862,n2=n2:7862"}, ""},
		{Config{Name: "n1", PeerAddr: "127.0.0.1:7862", InitialCluster: "n1=127.0.0.1:7862"}, ""},
		{Config{RequestTimeout: -time.Second}, "request timeout -1s must not be negative"},
		{Config{CacheBytes: 4096}, "cache bytes 4096 is below the 1 MiB minimum"},
		{Config{CacheBytes: -1}, "cache bytes -1 is below the 1 MiB minimum"},
		{Config{CacheBytes: 512 << 20}, ""},
	} {
		c := tc.cfg
		c.EnsureDefaults()
		err := c.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%+v: %v, want valid", tc.cfg, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.cfg.InitialCluster, err, tc.want)
		}
	}
}

// The zero Config is what Config's comment says: a working single-node
// store in ./dkv-data with no listeners, reached in-process.
func TestZeroConfigIsEmbeddedSingleNode(t *testing.T) {
	t.Chdir(t.TempDir())
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn := startInProcess(t, s)
	if s.ClientAddr() != "" || s.HTTPAddr() != "" || s.PeerAddr() != "" {
		t.Fatalf("zero config listens: client %q, http %q, peer %q", s.ClientAddr(), s.HTTPAddr(), s.PeerAddr())
	}
	if _, err := dkvpb.NewKVClient(conn).Put(ctx, &dkvpb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatalf("put in-process: %v", err)
	}
	if _, err := os.Stat(filepath.Join("dkv-data", "durability-witness")); err != nil {
		t.Fatalf("data is not in ./dkv-data: %v", err)
	}
}
