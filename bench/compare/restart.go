package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/bench/runner"
)

// restartWorkload is the measurement -restart adds for each system: one
// member restarted over the -bigkeys data, its time from process start to
// serving a linearizable get (Result.Extra["restart_ms"]).
const restartWorkload = "restart"

// restartMember stops member i, starts it again with the same command
// line and data, and returns the time from the new process's start until
// probe, a linearizable get through that member on a fresh connection,
// first succeeds. It polls every 10 ms: the resolution of the figure.
func (c *cluster) restartMember(ctx context.Context, i int, probe func(ctx context.Context, endpoint string) error) (time.Duration, error) {
	old := c.procs[i]
	old.stop()
	start := time.Now()
	p, err := startProc(old.name, old.log+".restart", old.cmd.Path, old.cmd.Args[1:]...)
	if err != nil {
		return 0, err
	}
	c.procs[i] = p
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := probe(pctx, c.endpoints[i])
		cancel()
		if err == nil {
			return time.Since(start), nil
		}
		if p.exited() {
			return 0, fmt.Errorf("%s exited after its restart: %v\n%s", p.name, p.err, p.logTail())
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%s not serving %v after its restart: %v", p.name, time.Since(start).Round(time.Millisecond), err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// measureRestart restarts the last member and reports the time as a
// measurement of sys.
func measureRestart(ctx context.Context, c config, cl *cluster, sys string, probe func(ctx context.Context, endpoint string) error) measurement {
	m := measurement{Workload: restartWorkload, System: sys}
	fmt.Fprintf(os.Stderr, "\n== %s restart: member %d of %d over %d keys\n", sys, len(cl.procs), len(cl.procs), c.bigKeys)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	d, err := cl.restartMember(rctx, len(cl.procs)-1, probe)
	if err != nil {
		m.Err = err.Error()
	} else {
		m.Result = &runner.Result{Workload: restartWorkload, Ops: 1, OK: 1, Extra: map[string]float64{"restart_ms": msOf(d)}}
		fmt.Fprintf(os.Stderr, "%s: member restarted and served a linearizable get in %v\n", sys, d.Round(time.Millisecond))
	}
	return m
}

// dkvProbe is a linearizable get of the big key space's first key through
// endpoint on a new connection.
func dkvProbe(ctx context.Context, endpoint string) error {
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = dkvpb.NewKVClient(conn).Range(ctx, &dkvpb.RangeRequest{Key: []byte(keyIn(bigPrefix, 0))})
	return err
}

// etcdProbe is dkvProbe for etcd, through clientv3 (linearizable by
// default).
func etcdProbe(ctx context.Context, endpoint string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	_, err = cli.Get(ctx, keyIn(bigPrefix, 0))
	return err
}

// restartMarkdown is curves.md's section for the restart measurements.
func restartMarkdown(c config, ms []measurement) string {
	var rows []string
	for _, sys := range curveSystems {
		for _, m := range ms {
			if m.Workload != restartWorkload || m.System != sys {
				continue
			}
			v := "error: " + m.Err
			if m.Err == "" && m.Result != nil {
				v = formatValue(m.Result.Extra["restart_ms"], true)
			}
			rows = append(rows, fmt.Sprintf("| %s | %s |", systemLabels[sys], v))
		}
	}
	if len(rows) == 0 {
		return ""
	}
	return fmt.Sprintf("## restart: one member restarted over %d keys\n\nTime from the member's process start to its first linearizable get served (a fresh connection every 10 ms), with the data the get-big preload wrote.\n\n| system | restart ms |\n|---|--:|\n%s\n", c.bigKeys, strings.Join(rows, "\n"))
}
