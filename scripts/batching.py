#!/usr/bin/env python3
"""Where a write's time goes, per member, at several client counts.

For each client count it runs `dkv bench WORKLOAD` against a running
cluster and reads, before and after the run, every member's /metrics and
its CPU time (/proc/PID/stat, utime+stime), then prints one table row per
(clients, member):

  - entries per synced raft log write (dkv_raft_sync_entries: mean, p50, p99)
  - entries per applied batch (dkv_apply_batch_entries: mean, p50, p99)
  - the raft loop's time split, as a share of the run's wall time:
    persist (dkv_raft_persist_seconds), step (dkv_raft_loop_step_seconds),
    send (dkv_raft_loop_send_seconds), apply hand-off
    (dkv_raft_loop_apply_handoff_seconds); and the apply goroutine's busy
    share (dkv_apply_seconds)
  - the mean synced raft write, apply batch and proposal (hand-off to
    applied result, on the member that proposed)
  - the member's CPU-ms per 10,000 ops

Usage:
  scripts/batching.py --dkv BIN --endpoints A,B,C --http H1,H2,H3 --pids P1,P2,P3 \
      [--clients 1,8,64,256] [--duration 8s] [--workload put] [-- extra bench flags]

Quantiles are read off the histogram buckets (the upper bound of the
bucket holding the quantile), as Prometheus' histogram_quantile would
without interpolation.
"""
import argparse, json, os, subprocess, sys, time, urllib.request

NAMES = {
    "sync": "dkv_raft_sync_entries",
    "apply": "dkv_apply_batch_entries",
    "persist": "dkv_raft_persist_seconds",
    "step": "dkv_raft_loop_step_seconds",
    "send": "dkv_raft_loop_send_seconds",
    "handoff": "dkv_raft_loop_apply_handoff_seconds",
    "applys": "dkv_apply_seconds",
    "prop": "dkv_proposal_seconds",
}
TICK = os.sysconf("SC_CLK_TCK")


def scrape(addr):
    out = {}
    with urllib.request.urlopen("http://%s/metrics" % addr, timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("#") or not line.strip():
                continue
            name, _, val = line.rpartition(" ")
            out[name] = float(val)
    return out


def cpu_ms(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000.0 / TICK


def hist(before, after, base):
    """Delta of one histogram: (count, sum, [(le, cumulative count)])."""
    cnt = after.get(base + "_count", 0) - before.get(base + "_count", 0)
    tot = after.get(base + "_sum", 0) - before.get(base + "_sum", 0)
    buckets = []
    for k, v in after.items():
        if k.startswith(base + '_bucket{le="'):
            le = k[len(base) + 12:-2]
            buckets.append((float("inf") if le == "+Inf" else float(le), v - before.get(k, 0)))
    buckets.sort()
    return cnt, tot, buckets


def quantile(buckets, cnt, q):
    if cnt <= 0:
        return float("nan")
    for le, c in buckets:
        if c >= q * cnt:
            return le
    return float("inf")


def fmt(x):
    if x != x:
        return "-"
    if x == float("inf"):
        return ">max"
    return ("%.1f" % x) if x < 100 else ("%d" % x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dkv", required=True)
    ap.add_argument("--endpoints", required=True)
    ap.add_argument("--http", required=True)
    ap.add_argument("--pids", required=True)
    ap.add_argument("--names", default="")
    ap.add_argument("--clients", default="1,8,64,256")
    ap.add_argument("--duration", default="8s")
    ap.add_argument("--workload", default="put")
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    https = a.http.split(",")
    pids = [int(p) for p in a.pids.split(",")]
    names = a.names.split(",") if a.names else ["m%d" % (i + 1) for i in range(len(pids))]
    print("| clients | ops/s | p50 | p99 | member | entries/fsync mean, p50, p99 | fsyncs/s | entries/apply batch mean, p50, p99 | loop: persist | step | send | apply hand-off | apply goroutine busy | mean synced write | mean apply batch | mean proposal | CPU-ms per 10k ops |")
    print("|--:|--:|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for c in [int(x) for x in a.clients.split(",")]:
        before = [scrape(h) for h in https]
        cpu0 = [cpu_ms(p) for p in pids]
        t0 = time.time()
        cmd = [a.dkv, "bench", a.workload, "-o", "json", "--endpoints", a.endpoints,
               "--clients", str(c), "--conns", str(min(c, 8)), "--duration", a.duration,
               "--keys", "10000", "--value-size", "256"] + a.extra
        res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        wall = time.time() - t0
        cpu1 = [cpu_ms(p) for p in pids]
        after = [scrape(h) for h in https]
        ops = res.get("ok", 0)
        lat = res.get("latency") or res.get("Latency") or {}
        rate = res.get("ops_per_sec", 0)
        p50 = "%.2f ms" % lat.get("p50_ms", 0)
        p99 = "%.2f ms" % lat.get("p99_ms", 0)
        for i, h in enumerate(https):
            b, f = before[i], after[i]
            sc, ss, sb = hist(b, f, NAMES["sync"])
            ac, as_, ab = hist(b, f, NAMES["apply"])
            share = {}
            for k in ("persist", "step", "send", "handoff", "applys"):
                _, s, _ = hist(b, f, NAMES[k])
                share[k] = "%.0f%%" % (100 * s / wall)
            cpu10k = (cpu1[i] - cpu0[i]) * 10000 / ops if ops else float("nan")
            means = []
            for k in ("persist", "applys", "prop"):
                n, t, _ = hist(b, f, NAMES[k])
                means.append("%.2f ms" % (1000 * t / n) if n else "-")
            row = [str(c), "%.0f" % rate if i == 0 else "", str(p50) if i == 0 else "", str(p99) if i == 0 else "", names[i],
                   "%s, %s, %s" % (fmt(ss / sc if sc else float("nan")), fmt(quantile(sb, sc, .5)), fmt(quantile(sb, sc, .99))),
                   "%.0f" % (sc / wall),
                   "%s, %s, %s" % (fmt(as_ / ac if ac else float("nan")), fmt(quantile(ab, ac, .5)), fmt(quantile(ab, ac, .99))),
                   share["persist"], share["step"], share["send"], share["handoff"], share["applys"]] + means + ["%.0f" % cpu10k]
            print("| " + " | ".join(row) + " |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
