package queuekeys

import "testing"

func TestOrderRoundTripAndSort(t *testing.T) {
	id := "0000000000000010deadbeef"
	hi := Order(5, 100, id)
	lo := Order(-5, 0, id)
	if !(hi < lo) {
		t.Fatalf("priority 5 (%s) must sort before priority -5 (%s)", hi, lo)
	}
	k, ok := ParseOrder(lo)
	if !ok || k.Priority != -5 || k.RunAtMs != 0 || k.ID != id || k.EnqNanos != 16 {
		t.Fatalf("ParseOrder(%s) = %+v, %v", lo, k, ok)
	}
	if _, ok := ParseOrder("paused"); ok {
		t.Fatal("ParseOrder accepted a non-order")
	}
}
