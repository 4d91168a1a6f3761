package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/dkv-io/dkv/client"
	"github.com/spf13/cobra"
)

// jsonWatchEvent is one line of `dkv watch -o json`.
type jsonWatchEvent struct {
	Type     string  `json:"type"` // PUT, DELETE, or SNAPSHOT for the initial state
	Revision int64   `json:"revision"`
	Key      *string `json:"key,omitempty"`
	KeyB64   string  `json:"key_base64,omitempty"` // instead of key, when it is not UTF-8
	KV       *jsonKV `json:"kv,omitempty"`
	PrevKV   *jsonKV `json:"prev_kv,omitempty"`
	// Marker is ENTER, CHANGE or LEAVE for a watch --query.
	Marker string `json:"marker,omitempty"`
}

func (a *App) watchCmd() *cobra.Command {
	var (
		prefix, snapshot, prev bool
		rev                    int64
		query                  string
	)
	cmd := &cobra.Command{
		Use:   "watch KEY",
		Short: "Print every change to a key or prefix as it happens",
		Long: `Watch KEY (or, with --prefix, every key starting with KEY) and print one
line per change until interrupted:

  PUT key value
  DELETE key

--snapshot first prints the current keys (as PUT lines) read at one
revision R, then every change after R: nothing missed, nothing twice.
--rev N starts with the changes from revision N on (exit 8, Compacted, if
N has been compacted). --prev adds the previous value ("PUT key value
(prev: old)"). -o json prints one object per line:
{"type":"PUT","revision":R,"key":..,"kv":{..},"prev_kv":{..}}; snapshot
entries have type SNAPSHOT.

The watch survives the loss of the node it is connected to: it resumes on
another --endpoints member from the last revision it printed. --timeout
bounds only connecting.

--query 'prefix=orders/ state=open' (and no KEY) watches a query's result
(docs/data-model.md): one line per key entering, changing within or
leaving it, "ENTER key value", "CHANGE key value", "LEAVE key"; with -o
json the object has "marker". --snapshot first prints the matching keys.`,
		Args: Args(cobra.RangeArgs(0, 1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if (query == "") == (len(argv) == 0) {
				return Usagef("give KEY or --query, not both or neither")
			}
			key := ""
			if len(argv) == 1 {
				key = argv[0]
			}
			if rev < 0 {
				return Usagef("--rev must not be negative")
			}
			if rev > 0 && snapshot {
				return Usagef("--rev and --snapshot are exclusive")
			}
			var opts []client.WatchOption
			if prefix {
				opts = append(opts, client.WithPrefix())
			}
			if rev > 0 {
				opts = append(opts, client.WithStartRevision(rev))
			}
			if snapshot {
				opts = append(opts, client.WithInitialSnapshot())
			}
			if prev {
				opts = append(opts, client.WithPrevKV())
			}
			if query != "" {
				if prefix {
					return Usagef("--prefix does not go with --query (use prefix= in the query)")
				}
				opts = append(opts, client.WithWatchQuery(query))
			}
			return a.runWatch(key, opts, prev)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&prefix, "prefix", false, "watch every key starting with KEY")
	f.Int64Var(&rev, "rev", 0, "start at revision N (replay history from N)")
	f.BoolVar(&snapshot, "snapshot", false, "print the current keys first, then the changes after them")
	f.BoolVar(&prev, "prev", false, "print each change's previous value")
	f.StringVar(&query, "query", "", "watch a query's result instead of KEY, e.g. 'prefix=orders/ state=open'")
	return cmd
}

// runWatch connects (within --timeout), then streams until SIGINT/SIGTERM
// or a failure.
func (a *App) runWatch(key string, opts []client.WatchOption, prev bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var eps []string
	for _, e := range strings.Split(a.endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	if len(eps) == 0 {
		return Usagef("--endpoints is empty")
	}
	dctx, cancel := context.WithTimeout(ctx, a.timeout)
	c, err := client.New(dctx, client.Config{Endpoints: eps, DialTimeout: a.timeout, TLS: a.tls.cfg, Store: a.store})
	cancel()
	if err != nil {
		return err
	}
	defer c.Close()
	// The watch lives until interrupted; only establishing it is bounded.
	type opened struct {
		w   *client.Watch
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		w, err := c.WatchKey(ctx, key, opts...)
		ch <- opened{w, err}
	}()
	var w *client.Watch
	select {
	case o := <-ch:
		if o.err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return o.err
		}
		w = o.w
	case <-ctx.Done():
		return nil
	}
	defer w.Stop()
	if init := w.Initial(); init != nil {
		for _, kv := range init.KVs {
			if err := a.printWatch(watchEvent("SNAPSHOT", init.Revision, kv.Key, toJSONKV(kv), nil), kv.Key, kv.Value, nil); err != nil {
				return err
			}
		}
	}
	for b := range w.Events() {
		for _, e := range b.Events {
			j := watchEvent(e.Type.String(), e.Revision, e.KV.Key, nil, toJSONKV(e.PrevKV))
			var prevVal []byte
			if e.PrevKV != nil {
				prevVal = e.PrevKV.Value
			}
			if e.Type == client.EventPut {
				j.KV = toJSONKV(e.KV)
			}
			if e.Marker != client.QueryNone {
				j.Marker = e.Marker.String()
				if !prev {
					j.PrevKV, prevVal = nil, nil // implied by the query watch, not asked for
				}
			}
			if err := a.printWatch(j, e.KV.Key, e.KV.Value, prevVal); err != nil {
				return err
			}
		}
	}
	if ctx.Err() != nil {
		return nil // interrupted
	}
	return w.Err()
}

func watchEvent(typ string, rev int64, key string, kv, prev *jsonKV) jsonWatchEvent {
	j := jsonWatchEvent{Type: typ, Revision: rev, KV: kv, PrevKV: prev}
	j.Key, j.KeyB64 = jsonKey(key)
	return j
}

func (a *App) printWatch(j jsonWatchEvent, key string, value, prev []byte) error {
	if a.JSON() {
		return WriteJSON(a.stdout, j)
	}
	var err error
	switch {
	case j.Marker == "LEAVE":
		_, err = fmt.Fprintf(a.stdout, "LEAVE %s", key)
	case j.Marker != "":
		_, err = fmt.Fprintf(a.stdout, "%s %s %s", j.Marker, key, value)
	case j.Type == "DELETE":
		_, err = fmt.Fprintf(a.stdout, "DELETE %s", key)
	default:
		_, err = fmt.Fprintf(a.stdout, "PUT %s %s", key, value)
	}
	if err == nil && j.PrevKV != nil {
		_, err = fmt.Fprintf(a.stdout, " (prev: %s)", prev)
	}
	if err == nil {
		_, err = fmt.Fprintln(a.stdout)
	}
	return err
}
