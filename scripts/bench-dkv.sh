#!/usr/bin/env bash
# Measures DKV on this machine for BENCHMARKS.md: single-node and 3-node
# put/get throughput and latency, bytes on disk per key, failover time and
# snapshot catch-up. Everything runs on loopback; it stops what it starts.
# Usage: scripts/bench-dkv.sh [DURATION]   (default 10s per workload)
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${1:-10s}
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT
go build -o "$WORK/dkv" ./cmd/dkv
DKV="$WORK/dkv"
echo "# $(date -u +%F) $(git rev-parse --short HEAD) $(nproc) cores, $(go version | cut -d' ' -f3)"

bench() { # endpoints workload clients [flags...]
	local eps=$1 w=$2 c=$3; shift 3
	"$DKV" bench "$w" --endpoints "$eps" --clients "$c" --conns $(( c < 8 ? c : 8 )) --duration "$DUR" --keys 10000 --value-size 256 -q "$@" | tail -n 1
}

if [ "${SKIP_SINGLE:-}" != 1 ]; then
echo "## single node"
"$DKV" serve --data-dir "$WORK/single" --client-addr 127.0.0.1:19861 --http-addr "" --peer-addr "" >"$WORK/single.log" 2>&1 &
pid=$!
until "$DKV" status --endpoints 127.0.0.1:19861 >/dev/null 2>&1; do sleep 0.2; done
echo "WORKLOAD  CLIENTS  OPS    OPS/S  P50     P90     P99     P99.9   MAX     ERRORS"
for c in 1 64; do
	bench 127.0.0.1:19861 put $c
	bench 127.0.0.1:19861 get $c
done
kill $pid; wait $pid 2>/dev/null || true

echo "## bytes on disk per key (100000 keys, 256-byte values, 16-byte keys)"
"$DKV" serve --data-dir "$WORK/size" --client-addr 127.0.0.1:19871 --http-addr "" --peer-addr "" >"$WORK/size.log" 2>&1 &
pid=$!
until "$DKV" status --endpoints 127.0.0.1:19871 >/dev/null 2>&1; do sleep 0.2; done
"$DKV" bench get --endpoints 127.0.0.1:19871 --keys 100000 --total 1 --value-size 256 -q >/dev/null
kill -INT $pid; wait $pid 2>/dev/null || true
bytes=$(du -sb "$WORK/size" | cut -f1)
echo "data dir after 100000 keys: $bytes bytes = $(( bytes / 100000 )) bytes/key (raft log tail, WAL and MVCC history included)"

fi
echo "## 3 nodes (dkv dev-cluster)"
(cd "$WORK" && "$DKV" dev-cluster --nodes 3 --base-port 19881 --data-dir "$WORK/dev" >"$WORK/dev.log" 2>&1) &
EPS=127.0.0.1:19881,127.0.0.1:19891,127.0.0.1:19901
until "$DKV" status --endpoints $EPS >/dev/null 2>&1; do sleep 0.2; done
"$DKV" put warmup x --endpoints $EPS >/dev/null
echo "WORKLOAD  CLIENTS  OPS    OPS/S  P50     P90     P99     P99.9   MAX     ERRORS"
for c in 1 16 64; do
	bench $EPS put $c
	bench $EPS get $c
done
