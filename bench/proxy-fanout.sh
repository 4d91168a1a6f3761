#!/usr/bin/env bash
# Many watchers of one prefix behind two `dkv proxy` processes, then the
# same watchers straight on the members, for BENCHMARKS.md ("Watch"). It
# starts a 3-member cluster of `dkv serve` processes and 2 proxies on
# loopback, runs `dkv bench watch-fanout` through the proxies, and while
# the writer runs scrapes the members' and proxies' /metrics (watches held)
# and VmRSS; then it runs the same workload against the members. Every
# watcher must get every put once and in order (the bench fails otherwise).
#
# Usage: bench/proxy-fanout.sh
#   WATCHERS=100000 CONNS=1000 RATE=10 DURATION=60s  the workload (defaults;
#                                                    DURATION in seconds)
#   BASE_PORT=37200                                    ports BASE..BASE+60
#   SKIP_DIRECT=1                                      only the proxy run
#   KEEP=1                                             keep the work dir (logs, results)
#
# It kills only the processes it started, by PID, and bounds every wait.
set -euo pipefail
cd "$(dirname "$0")/.."

WATCHERS=${WATCHERS:-100000}
CONNS=${CONNS:-1000}
RATE=${RATE:-10}
DURATION=${DURATION:-60s}
BASE=${BASE_PORT:-37200}
WORK=$(mktemp -d /tmp/proxy-fanout.XXXXXX)
PIDS=()

cleanup() {
	local pid
	for pid in "${PIDS[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		# bounded: a member that ignores SIGTERM for 15 s gets SIGKILL
		for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
	done
	if [ "${KEEP:-}" = 1 ]; then echo "work dir kept: $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

go build -o "$WORK/dkv" ./cmd/dkv
DKV="$WORK/dkv"

member_client() { echo "127.0.0.1:$((BASE + 10 * $1 + 1))"; }
member_peer() { echo "127.0.0.1:$((BASE + 10 * $1 + 2))"; }
member_http() { echo "127.0.0.1:$((BASE + 10 * $1 + 3))"; }
proxy_listen() { echo "127.0.0.1:$((BASE + 40 + 10 * $1 + 1))"; }
proxy_http() { echo "127.0.0.1:$((BASE + 40 + 10 * $1 + 3))"; }

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

# metric URL NAME: the value of an unlabelled metric.
metric() { curl -sf --max-time 5 "http://$1/metrics" | awk -v n="$2" '$1 == n { printf "%d\n", $2; found = 1 } END { if (!found) print "?" }'; }
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

# Another run (or anyone) on these ports would mix its members and values
# into this one: refuse to start.
for port in $(seq "$BASE" $((BASE + 60))); do
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
		echo "port $port is in use: is another run going? (BASE_PORT=... picks others)" >&2
		exit 1
	fi
done

CLUSTER=""
for i in 1 2 3; do CLUSTER+="${CLUSTER:+,}n$i=$(member_peer $i)"; done
MEMBERS=""
MEMBER_PIDS=()
for i in 1 2 3; do
	"$DKV" serve --name "n$i" --data-dir "$WORK/n$i" --client-addr "$(member_client $i)" \
		--peer-addr "$(member_peer $i)" --http-addr "$(member_http $i)" \
		--initial-cluster "$CLUSTER" --initial-cluster-token "proxy-fanout-$$" >"$WORK/n$i.log" 2>&1 &
	PIDS+=($!)
	MEMBER_PIDS+=($!)
	MEMBERS+="${MEMBERS:+,}$(member_client $i)"
done
wait_for "the cluster" 60 "$DKV" put --endpoints "$MEMBERS" bench/fanout-warmup x

PROXIES=""
PROXY_PIDS=()
for i in 1 2; do
	"$DKV" proxy --endpoints "$MEMBERS" --listen-addr "$(proxy_listen $i)" --http-addr "$(proxy_http $i)" >"$WORK/p$i.log" 2>&1 &
	PIDS+=($!)
	PROXY_PIDS+=($!)
	PROXIES+="${PROXIES:+,}$(proxy_listen $i)"
	wait_for "proxy $i" 30 curl -sf --max-time 2 "http://$(proxy_http $i)/readyz"
done

echo "# $(date -u '+%F %H:%M UTC') $(git rev-parse --short HEAD), $(nproc) cores, $(go version | cut -d' ' -f3)"
echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $WATCHERS watchers over $CONNS connections, $RATE puts/s for $DURATION"

# metric_sum NAME ADDR...: NAME summed over the HTTP addresses (an absent one as 0).
metric_sum() {
	local name=$1 addr s=0 v
	shift
	for addr in "$@"; do
		v=$(metric "$addr" "$name")
		[ "$v" = "?" ] && v=0
		s=$((s + v))
	done
	echo "$s"
}
members_watchers() { metric_sum dkv_watchers "$(member_http 1)" "$(member_http 2)" "$(member_http 3)"; }
proxies_local() { metric_sum dkv_proxy_local_watchers "$(proxy_http 1)" "$(proxy_http 2)"; }
all_created() { [ "$("$1")" -ge "$WATCHERS" ]; }
no_member_watches() { [ "$(members_watchers)" -eq 0 ]; }

# run NAME ENDPOINTS COUNT_FN PIDS...: runs the workload in the background;
# once COUNT_FN reports every watch open, samples the metrics and the RSS
# of PIDS (against their RSS before the run) mid-run.
run() {
	local name=$1 eps=$2 count=$3 pid before=() after=() i
	shift 3
	local pids=("$@")
	for pid in "$@"; do before+=("$(rss_kib "$pid")"); done
	# bound: the run, a second per 1,000 watches to create, a minute to drain, slack
	local secs=$(( ${DURATION%s} + WATCHERS / 1000 + 60 + 120 ))
	timeout "$secs" "$DKV" bench watch-fanout --endpoints "$eps" --route spread \
		--watchers "$WATCHERS" --watch-conns "$CONNS" --rate "$RATE" --duration "$DURATION" \
		--op-timeout 10s -q >"$WORK/$name.out" 2>"$WORK/$name.err" &
	local bpid=$!
	PIDS+=($bpid)
	if wait_for "$name: $WATCHERS watches open" $((WATCHERS / 1000 + 60)) all_created "$count"; then
		sleep 5 # a few puts' worth, so the sample is of the running state
		echo "## $name, mid-run (all watches open, writer running)"
		for i in 1 2 3; do
			echo "member n$i: dkv_watchers $(metric "$(member_http $i)" dkv_watchers)"
		done
		if [ "$name" = proxies ]; then
			for i in 1 2; do
				echo "proxy p$i: dkv_proxy_local_watchers $(metric "$(proxy_http $i)" dkv_proxy_local_watchers)," \
					"dkv_proxy_upstream_watches $(metric "$(proxy_http $i)" dkv_proxy_upstream_watches)"
			done
		fi
		for pid in "$@"; do after+=("$(rss_kib "$pid")"); done
		local total_before=0 total_after=0
		for i in "${!before[@]}"; do
			echo "RSS pid ${pids[$i]}: ${before[$i]} KiB before, ${after[$i]} KiB with the watches"
			total_before=$((total_before + before[i]))
			total_after=$((total_after + after[i]))
		done
		echo "RSS growth: $(( (total_after - total_before) / 1024 )) MiB = $(( (total_after - total_before) * 1024 / WATCHERS )) bytes per watcher" \
			"(total $(( total_after / 1024 )) MiB = $(( total_after * 1024 / WATCHERS )) bytes per watcher)"
	fi
	local rc=0
	wait "$bpid" || rc=$?
	echo "## $name: dkv bench watch-fanout (exit $rc)"
	cat "$WORK/$name.out"
	if [ "$rc" != 0 ]; then tail -n 20 "$WORK/$name.err" >&2; fi
	echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
	return "$rc"
}

status=0
run proxies "$PROXIES" proxies_local "${PROXY_PIDS[@]}" || status=1
if [ "${SKIP_DIRECT:-}" != 1 ]; then
	# the proxies' upstream watches end with their local ones; wait, bounded
	wait_for "the members' watches to close" 60 no_member_watches || true
	run members "$MEMBERS" members_watchers "${MEMBER_PIDS[@]}" || status=1
fi
exit $status
