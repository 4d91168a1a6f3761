#!/usr/bin/env bash
# Many watchers of one prefix through the etcd v3 API, behind proxies and
# straight on the members, for etcd 3.7.3 (`etcd grpc-proxy start`) and DKV
# (`dkv proxy`) side by side, for BENCHMARKS.md ("Watch"). The workload is
# bench/compare/etcdfanout (clientv3 only): WATCHERS watches on one prefix
# over CONNS clients, writers putting at RATE puts/s for DURATION; every
# watcher must get every acknowledged put once and in order (it exits 1
# otherwise, and this script reports the error).
#
# For each system it starts 3 members and 2 proxies on loopback, runs the
# workload through the proxies, then straight on the members; once every
# watch is created (the workload says so on stderr) and the writers have
# run 5 s, it reads the upstream watch counts (etcd members:
# etcd_debugging_mvcc_watch_stream_total and
# etcd_debugging_mvcc_watcher_total; etcd proxies:
# etcd_grpc_proxy_watchers_coalescing_total, which counts only watchers
# that joined a broadcast after its first response, so it stays 0 when all
# watches are created before the first put; dkv members: dkv_watchers;
# dkv proxies: dkv_proxy_local_watchers, dkv_proxy_upstream_watches) and
# the VmRSS of the processes holding the watches against their RSS before
# the run. It samples the counts before each run too: etcd's grpc-proxy
# holds watches of its own. The proxies are stopped before the direct run.
#
# Usage: bench/proxy-fanout-etcd.sh
#   WATCHERS=10000 CONNS=100 RATE=10 DURATION=30s   the workload (defaults;
#                                                  DURATION in seconds)
#   BASE_PORT=38200                                  ports BASE..BASE+160
#   SYSTEMS="etcd dkv"                               which systems, in order
#   SKIP_DIRECT=1                                    only the proxy runs
#   ETCD37_BIN=... FANOUT_BIN=... DKV_BIN=...        prebuilt binaries
#   KEEP=1                                           keep the work dir
#
# It kills only the processes it started, by PID, and bounds every wait.
set -euo pipefail
cd "$(dirname "$0")/.."

WATCHERS=${WATCHERS:-10000}
CONNS=${CONNS:-100}
RATE=${RATE:-10}
DURATION=${DURATION:-30s}
BASE=${BASE_PORT:-38200}
SYSTEMS=${SYSTEMS:-etcd dkv}
WORK=$(mktemp -d /tmp/proxy-fanout-etcd.XXXXXX)
PIDS=()

stop_pids() {
	local pid
	for pid in "$@"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "$@"; do
		# bounded: a process that ignores SIGTERM for 15 s gets SIGKILL
		for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
	done
}
cleanup() {
	stop_pids "${PIDS[@]}"
	if [ "${KEEP:-}" = 1 ]; then echo "work dir kept: $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

DKV=${DKV_BIN:-}
if [ -z "$DKV" ]; then
	go build -o "$WORK/dkv" ./cmd/dkv
	DKV="$WORK/dkv"
fi
ETCD=${ETCD37_BIN:-}
if [ -z "$ETCD" ]; then
	(cd bench/compare && go build -o "$WORK/etcd37" ./etcd37)
	ETCD="$WORK/etcd37"
fi
FANOUT=${FANOUT_BIN:-}
if [ -z "$FANOUT" ]; then
	(cd bench/compare && go build -o "$WORK/etcdfanout" ./etcdfanout)
	FANOUT="$WORK/etcdfanout"
fi

# Ports: etcd at BASE, dkv at BASE+100; member i: +10i+1 client, +2 peer,
# +3 HTTP (dkv); proxy i: +40+10i+1 listen, +3 metrics/HTTP.
sys_base() { if [ "$1" = etcd ]; then echo "$BASE"; else echo $((BASE + 100)); fi; }
member_client() { echo "127.0.0.1:$(($(sys_base "$1") + 10 * $2 + 1))"; }
member_peer() { echo "127.0.0.1:$(($(sys_base "$1") + 10 * $2 + 2))"; }
member_http() {
	# etcd serves /metrics on its client URL
	if [ "$1" = etcd ]; then member_client "$1" "$2"; else echo "127.0.0.1:$(($(sys_base "$1") + 10 * $2 + 3))"; fi
}
proxy_listen() { echo "127.0.0.1:$(($(sys_base "$1") + 40 + 10 * $2 + 1))"; }
proxy_http() { echo "127.0.0.1:$(($(sys_base "$1") + 40 + 10 * $2 + 3))"; }

# wait_for DESCRIPTION SECONDS COMMAND...: polls COMMAND every 0.2 s.
wait_for() {
	local what=$1 secs=$2 i
	shift 2
	for ((i = 0; i < secs * 5; i++)); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.2
	done
	echo "timed out after ${secs}s waiting for $what" >&2
	return 1
}

# metric ADDR NAME: the value of an unlabelled metric ("?" if absent).
metric() {
	curl -sf --max-time 5 "http://$1/metrics" |
		awk -v n="$2" '$1 == n { printf "%d\n", $2; found = 1 } END { if (!found) print "?" }'
}
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

for port in $(seq "$BASE" $((BASE + 160))); do
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
		echo "port $port is in use: is another run going? (BASE_PORT=... picks others)" >&2
		exit 1
	fi
done

echo "# $(date -u '+%F %H:%M UTC') $(git rev-parse --short HEAD), $(nproc) cores, $(go version | cut -d' ' -f3), etcd: $("$ETCD" --version | head -1)"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $WATCHERS watchers over $CONNS clientv3 clients, 4 writers at $RATE puts/s in all for $DURATION (bench/compare/etcdfanout)"

MEMBER_PIDS=()
PROXY_PIDS=()

start_etcd() {
	local i cluster="" eps=""
	for i in 1 2 3; do cluster+="${cluster:+,}e$i=http://$(member_peer etcd $i)"; done
	MEMBER_PIDS=()
	for i in 1 2 3; do
		"$ETCD" --name "e$i" --data-dir "$WORK/etcd-e$i" \
			--listen-client-urls "http://$(member_client etcd $i)" --advertise-client-urls "http://$(member_client etcd $i)" \
			--listen-peer-urls "http://$(member_peer etcd $i)" --initial-advertise-peer-urls "http://$(member_peer etcd $i)" \
			--initial-cluster "$cluster" --initial-cluster-token "proxy-fanout-etcd-$$" --initial-cluster-state new \
			--heartbeat-interval 100 --election-timeout 1000 --logger zap --log-level warn >"$WORK/etcd-e$i.log" 2>&1 &
		PIDS+=($!)
		MEMBER_PIDS+=($!)
		eps+="${eps:+,}$(member_client etcd $i)"
	done
	MEMBERS=$eps
	for i in 1 2 3; do
		wait_for "etcd member e$i" 60 sh -c "curl -sf --max-time 2 http://$(member_client etcd $i)/health | grep -q '\"health\":\"true\"'"
	done
	PROXY_PIDS=()
	PROXIES=""
	for i in 1 2; do
		"$ETCD" grpc-proxy start --endpoints "$MEMBERS" --listen-addr "$(proxy_listen etcd $i)" \
			--advertise-client-url "$(proxy_listen etcd $i)" --metrics-addr "http://$(proxy_http etcd $i)" \
			--data-dir "$WORK/etcd-p$i" >"$WORK/etcd-p$i.log" 2>&1 &
		PIDS+=($!)
		PROXY_PIDS+=($!)
		PROXIES+="${PROXIES:+,}$(proxy_listen etcd $i)"
		wait_for "etcd grpc-proxy $i" 30 curl -sf --max-time 2 "http://$(proxy_http etcd $i)/metrics"
	done
}

start_dkv() {
	local i cluster="" eps=""
	for i in 1 2 3; do cluster+="${cluster:+,}n$i=$(member_peer dkv $i)"; done
	MEMBER_PIDS=()
	for i in 1 2 3; do
		"$DKV" serve --name "n$i" --data-dir "$WORK/dkv-n$i" --client-addr "$(member_client dkv $i)" \
			--peer-addr "$(member_peer dkv $i)" --http-addr "$(member_http dkv $i)" \
			--initial-cluster "$cluster" --initial-cluster-token "proxy-fanout-etcd-$$" >"$WORK/dkv-n$i.log" 2>&1 &
		PIDS+=($!)
		MEMBER_PIDS+=($!)
		eps+="${eps:+,}$(member_client dkv $i)"
	done
	MEMBERS=$eps
	wait_for "the dkv cluster" 60 "$DKV" put --endpoints "$MEMBERS" bench/fanout-warmup x
	PROXY_PIDS=()
	PROXIES=""
	for i in 1 2; do
		"$DKV" proxy --endpoints "$MEMBERS" --listen-addr "$(proxy_listen dkv $i)" --http-addr "$(proxy_http dkv $i)" >"$WORK/dkv-p$i.log" 2>&1 &
		PIDS+=($!)
		PROXY_PIDS+=($!)
		PROXIES+="${PROXIES:+,}$(proxy_listen dkv $i)"
		wait_for "dkv proxy $i" 30 curl -sf --max-time 2 "http://$(proxy_http dkv $i)/readyz"
	done
}

# sample SYSTEM VIA: the watch counts the members and proxies report.
sample() {
	local sys=$1 via=$2 i
	for i in 1 2 3; do
		if [ "$sys" = etcd ]; then
			echo "member e$i: etcd_debugging_mvcc_watch_stream_total $(metric "$(member_http etcd $i)" etcd_debugging_mvcc_watch_stream_total)," \
				"etcd_debugging_mvcc_watcher_total $(metric "$(member_http etcd $i)" etcd_debugging_mvcc_watcher_total)"
		else
			echo "member n$i: dkv_watchers $(metric "$(member_http dkv $i)" dkv_watchers)"
		fi
	done
	if [ "$via" = proxies ]; then
		for i in 1 2; do
			if [ "$sys" = etcd ]; then
				echo "proxy p$i: etcd_grpc_proxy_watchers_coalescing_total $(metric "$(proxy_http etcd $i)" etcd_grpc_proxy_watchers_coalescing_total)"
			else
				echo "proxy p$i: dkv_proxy_local_watchers $(metric "$(proxy_http dkv $i)" dkv_proxy_local_watchers)," \
					"dkv_proxy_upstream_watches $(metric "$(proxy_http dkv $i)" dkv_proxy_upstream_watches)"
			fi
		done
	fi
}

# run SYSTEM VIA ENDPOINTS PIDS...: runs the workload in the background;
# once it reports every watch created, samples the counts and the RSS of
# PIDS (against their RSS before the run) mid-run.
run() {
	local sys=$1 via=$2 eps=$3 name="$1-$2" pid before=() after=() i
	shift 3
	local pids=("$@")
	echo "## $name, before the run"
	sample "$sys" "$via"
	for pid in "$@"; do before+=("$(rss_kib "$pid")"); done
	# bound: the run, a second per 1,000 watches to create, a minute to drain, slack
	local secs=$((${DURATION%s} + WATCHERS / 1000 + 60 + 120))
	timeout "$secs" "$FANOUT" --system "$name" --endpoints "$eps" --watchers "$WATCHERS" --conns "$CONNS" \
		--rate "$RATE" --duration "$DURATION" --json "$WORK/$name.json" >"$WORK/$name.out" 2>"$WORK/$name.err" &
	local bpid=$!
	PIDS+=($bpid)
	if wait_for "$name: $WATCHERS watches created" $((WATCHERS / 1000 + 60)) grep -q "all $WATCHERS watches created" "$WORK/$name.err"; then
		sleep 5 # a few puts' worth, so the sample is of the running state
		echo "## $name, mid-run (all watches created, writers running)"
		sample "$sys" "$via"
		for pid in "$@"; do after+=("$(rss_kib "$pid")"); done
		local total_before=0 total_after=0
		for i in "${!before[@]}"; do
			echo "RSS pid ${pids[$i]}: ${before[$i]} KiB before, ${after[$i]} KiB with the watches"
			total_before=$((total_before + before[i]))
			total_after=$((total_after + after[i]))
		done
		echo "RSS growth: $(((total_after - total_before) / 1024)) MiB = $(((total_after - total_before) * 1024 / WATCHERS)) bytes per watcher" \
			"(total $((total_after / 1024)) MiB = $((total_after * 1024 / WATCHERS)) bytes per watcher)"
		# $bpid is timeout(1); the workload is its child
		local child
		child=$(pgrep -P "$bpid" | head -n 1 || true)
		echo "workload client (etcdfanout) RSS: $( [ -n "$child" ] && rss_kib "$child" || echo ?) KiB"
	fi
	local rc=0
	wait "$bpid" || rc=$?
	echo "## $name: etcdfanout (exit $rc)"
	cat "$WORK/$name.out"
	if [ "$rc" != 0 ]; then
		echo "## $name: FAILED, last lines of its stderr:"
		tail -n 5 "$WORK/$name.err"
	fi
	echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
	return "$rc"
}

# no_member_watches SYSTEM: the members hold no watches (the proxies'
# upstream watches end with their local ones).
no_member_watches() {
	local i v
	for i in 1 2 3; do
		if [ "$1" = etcd ]; then
			v=$(metric "$(member_http etcd $i)" etcd_debugging_mvcc_watcher_total)
		else
			v=$(metric "$(member_http dkv $i)" dkv_watchers)
		fi
		[ "$v" = 0 ] || return 1
	done
}

status=0
for sys in $SYSTEMS; do
	echo "# === $sys ==="
	"start_$sys"
	run "$sys" proxies "$PROXIES" "${PROXY_PIDS[@]}" || status=1
	if [ "${SKIP_DIRECT:-}" != 1 ]; then
		# The proxies hold watches of their own (etcd's grpc-proxy watches
		# a key to notice a lost leader): stop them, so the members' counts
		# in the direct run are the workload's alone.
		stop_pids "${PROXY_PIDS[@]}"
		wait_for "the $sys members' watches to close" 60 no_member_watches "$sys" || true
		run "$sys" members "$MEMBERS" "${MEMBER_PIDS[@]}" || status=1
	fi
	stop_pids "${PROXY_PIDS[@]}" "${MEMBER_PIDS[@]}"
	PIDS=() # all stopped or waited for: none to kill again at exit
done
exit $status
