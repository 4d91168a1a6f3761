#!/usr/bin/env bash
# TLS / auth cost: dkv bench put and get against a 3-node dev cluster,
# plaintext vs --secure (TLS + client certs), auth off / root / a prefix user.
set -u
BIN=${BIN:-bin/dkv}  # make build
D=${DATA:-/tmp/dkv-bench-auth}; rm -rf $D; mkdir -p $D
E=127.0.0.1:17861,127.0.0.1:17871,127.0.0.1:17881
B="bench --clients 64 --duration ${DUR:-6s} --keys 10000 -q"
run() { # label, flags...
  local label=$1; shift
  for w in put get; do
    echo "== $label $w"; $BIN --endpoints $E "$@" $B $w 2>&1 | grep -E "^(put|get) "
  done
}
start() { $BIN dev-cluster --data-dir $D --fresh "$@" > $D/log 2>&1 & echo $! > $D/pid; for i in $(seq 60); do grep -q "${READY}" $D/log && return; sleep 0.5; done; echo "not ready"; cat $D/log; }
stop() { kill $(cat $D/pid); wait $(cat $D/pid) 2>/dev/null; sleep 1; }
READY="try:"; start; sleep 2; run plain
echo "== ratelimit"; $BIN --endpoints $E bench ratelimit --clients 16 --duration ${DUR:-6s} -q 2>&1 | tail -4
echo "== queue"; $BIN --endpoints $E bench queue --clients 16 --duration ${DUR:-6s} -q 2>&1 | tail -6
stop
READY="secure cluster up"; start --secure; sleep 1
T="--cacert $D/tls/ca.crt --cert $D/tls/client-root.crt --key $D/tls/client-root.key"
run "tls+auth(root,cert)" $T
$BIN --endpoints $E $T role add benchrole >/dev/null
$BIN --endpoints $E $T role grant-permission benchrole readwrite bench/ --prefix >/dev/null
$BIN --endpoints $E $T user add alice --password pw >/dev/null
$BIN --endpoints $E $T user grant-role alice benchrole >/dev/null
run "tls+auth(alice,token)" $T --user alice:pw
$BIN --endpoints $E $T auth disable
run "tls,auth-off" $T
stop
READY="try:"; start; sleep 2; run plain-again; stop
