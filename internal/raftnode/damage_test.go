package raftnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/dkv-io/dkv/internal/storage"
	"github.com/dkv-io/dkv/internal/testutil"
	"go.etcd.io/raft/v3"
)

// scanSM reads a range on every apply and panics on a storage error, as
// the mvcc store does.
type scanSM struct{ counterSM }

func (m *scanSM) Apply(b *pebble.Batch, index uint64, data []byte) (uint64, uint64) {
	it, err := b.NewIter(&pebble.IterOptions{LowerBound: []byte("s/test/fill/"), UpperBound: []byte("s/test/fill0")})
	if err != nil {
		panic(fmt.Sprintf("storage failure during apply: %v", err))
	}
	for it.First(); it.Valid(); it.Next() {
	}
	if err := it.Error(); err != nil {
		it.Close()
		panic(fmt.Sprintf("storage failure during apply: %v", err))
	}
	it.Close()
	return m.counterSM.Apply(b, index, data)
}

// A checksum failure the state machine hits while applying stops applying
// without a panic: the storage reports the damage, nothing more is applied
// (the proposal is never answered with a result), and Stop returns.
func TestDamageDuringApplyStopsWithoutPanic(t *testing.T) {
	dir := t.TempDir()
	damaged := make(chan error, 1)
	st, err := storage.Open(dir, storage.Options{NoSync: true, OnDamage: func(err error) { damaged <- err }})
	if err != nil {
		t.Fatal(err)
	}
	val := make([]byte, 1024)
	for i := 0; i < 2000; i++ {
		if err := st.DB().Set(fmt.Appendf(nil, "s/test/fill/%06d", i), val, pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	ssts, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
	if len(ssts) == 0 {
		t.Fatal("no sst")
	}
	for _, f := range ssts {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i := len(b) / 2; i < len(b)/2+8; i++ {
			b[i] ^= 0xff
		}
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sm := &scanSM{counterSM{t: t, db: st.DB(), applied: map[uint64]int{}}}
	n, err := New(Config[uint64]{
		ID: 1, Storage: st, StateMachine: sm,
		TickInterval: 10 * time.Millisecond, ElectionTicks: 5,
		Peers:  []raft.Peer{{ID: 1}},
		Logger: testutil.Quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	n.Run()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if res, err := propose(ctx, n); err == nil {
		t.Fatalf("a proposal applied over damaged data answered %v", res)
	}
	select {
	case err := <-damaged:
		if !errors.Is(err, storage.ErrDamaged) {
			t.Fatalf("OnDamage got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("damage never reported")
	}
	stopped := make(chan struct{})
	go func() { n.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop hung after damage")
	}
	st.Close()
}
