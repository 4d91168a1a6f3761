#!/usr/bin/env bash
# Serializable gets at 64 clients straight on a 3-member cluster and
# through two `dkv proxy` processes (their read cache on), in turn, three
# rounds, for BENCHMARKS.md ("Watch", dkv proxy). Builds nothing: DKV is
# the dkv binary to run (default ./dkv-bin, built with
# `go build -o dkv-bin ./cmd/dkv`). Ports 38300-38380. It kills only the
# processes it started.
set -u
B=38300; W=$(mktemp -d /tmp/serial.XXXX); DKV=${DKV:-./dkv-bin}; PIDS=()
trap 'for p in "${PIDS[@]}"; do kill $p 2>/dev/null; done; sleep 2; for p in "${PIDS[@]}"; do kill -9 $p 2>/dev/null; done; rm -rf $W' EXIT
CL=""; for i in 1 2 3; do CL+="${CL:+,}n$i=127.0.0.1:$((B+10*i+2))"; done
M=""
for i in 1 2 3; do
  $DKV serve --name n$i --data-dir $W/n$i --client-addr 127.0.0.1:$((B+10*i+1)) --peer-addr 127.0.0.1:$((B+10*i+2)) --http-addr 127.0.0.1:$((B+10*i+3)) --initial-cluster "$CL" --initial-cluster-token ser-$$ > $W/n$i.log 2>&1 & PIDS+=($!)
  M+="${M:+,}127.0.0.1:$((B+10*i+1))"
done
for t in $(seq 150); do $DKV put --endpoints $M warm x >/dev/null 2>&1 && break; sleep 0.2; done
P=""
for i in 1 2; do $DKV proxy --endpoints $M --listen-addr 127.0.0.1:$((B+50+10*i+1)) --http-addr 127.0.0.1:$((B+50+10*i+3)) > $W/p$i.log 2>&1 & PIDS+=($!); P+="${P:+,}127.0.0.1:$((B+50+10*i+1))"; done
for i in 1 2; do for t in $(seq 150); do curl -sf http://127.0.0.1:$((B+50+10*i+3))/readyz >/dev/null && break; sleep 0.2; done; done
echo "# $(date -u '+%F %H:%M UTC') load $(cut -d' ' -f1-3 /proc/loadavg)"
# preload once through the members
$DKV bench put --endpoints $M --clients 16 --keys 10000 --total 10000 --quiet -o json > /dev/null
for r in 1 2 3; do
  for tgt in members proxies; do
    eps=$M; [ $tgt = proxies ] && eps=$P
    out=$($DKV bench get --serializable --no-preload --endpoints $eps --clients 64 --keys 10000 --duration 10s --quiet -o json)
    echo "$r $tgt $(echo "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(round(d["ops_per_sec"]), d["latency"]["p50_ms"], d["latency"]["p99_ms"], d.get("errors"))')"
  done
done
for i in 1 2; do curl -s http://127.0.0.1:$((B+50+10*i+3))/metrics | grep -E "^dkv_proxy_read_cache_(hits|misses)_total|^dkv_proxy_read_cache_bytes"; done
