package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/client"
	"github.com/spf13/cobra"
)

func (a *App) endpointCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "endpoint",
		Short: "Check each endpoint (member) on its own: health, status",
		Long: `Each endpoint in --endpoints is asked directly, over its own connection
(no discovery, no balancing), so the answer is that member's. With
--cluster, the endpoints are every member's client URL, from the member
list that --endpoints answers. Names and output follow etcdctl's.`,
		Args: Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return Usagef("endpoint needs a subcommand: health, status, hashkv")
		},
	}
	var cluster bool
	cmd.PersistentFlags().BoolVar(&cluster, "cluster", false, "check every member's client URL from the member list")
	cmd.AddCommand(&cobra.Command{
		Use:   "health",
		Short: "Check that each endpoint serves a linearizable read",
		Long: `For each endpoint, a linearizable read (which needs the member to reach a
quorum through the leader) and the time it took:

  127.0.0.1:7861 is healthy: served a linearizable read: took = 1.2ms
  127.0.0.1:7871 is unhealthy: failed to serve a linearizable read: <why>

Exits 7 (Unavailable) if any endpoint is unhealthy. -o json prints
[{"endpoint":..,"health":true,"took":"1.2ms","took_ms":1.2,"error":".."}].`,
		Args: Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			eps, err := a.endpointTargets(cluster)
			if err != nil {
				return err
			}
			return a.endpointHealth(eps)
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "status",
		Short: "Show each endpoint's status in a table",
		Long: `A row per endpoint: ENDPOINT ID NAME VERSION DB SIZE IS LEADER IS LEARNER
RAFT TERM RAFT INDEX RAFT APPLIED INDEX TOOK ERRORS. An endpoint that does
not answer has only ERRORS, and makes dkv exit 7 (Unavailable). -o json
prints [{"endpoint":..,"status":{as dkv status -o json},"took_ms":..,"error":..}].`,
		Args: Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			eps, err := a.endpointTargets(cluster)
			if err != nil {
				return err
			}
			return a.endpointStatus(eps)
		},
	})
	cmd.AddCommand(a.endpointHashKVCmd(&cluster))
	return cmd
}

// endpointTargets is --endpoints, or with cluster every member's client
// URL as the cluster lists them.
func (a *App) endpointTargets(cluster bool) ([]string, error) {
	eps, err := a.endpointList()
	if err != nil {
		return nil, err
	}
	if !cluster {
		return eps, nil
	}
	var urls []string
	err = a.run(func(ctx context.Context, c *client.Client) error {
		ml, err := dkvpb.NewClusterClient(c.Conn()).MemberList(ctx, &dkvpb.MemberListRequest{})
		if err != nil {
			return err
		}
		for _, m := range ml.GetMembers() {
			if u := m.GetClientUrl(); u != "" {
				urls = append(urls, u)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing members for --cluster: %w", err)
	}
	if len(urls) == 0 {
		return nil, fmt.Errorf("--cluster: no member has published a client URL yet")
	}
	return urls, nil
}

type jsonHealth struct {
	Endpoint string  `json:"endpoint"`
	Health   bool    `json:"health"`
	Took     string  `json:"took"`
	TookMs   float64 `json:"took_ms"`
	Error    string  `json:"error,omitempty"`
}

func (a *App) endpointHealth(eps []string) error {
	took := make([]time.Duration, len(eps))
	errs := make([]error, len(eps))
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	for i, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			errs[i] = a.oneEndpoint(ctx, ep, func(ctx context.Context, c *client.Client) error {
				start = time.Now() // the read alone, not the dial
				_, err := c.Get(ctx, "dkv/health")
				if errors.Is(err, client.ErrNotFound) {
					err = nil
				}
				return err
			})
			took[i] = time.Since(start)
		}()
	}
	wg.Wait()
	bad := 0
	out := make([]jsonHealth, len(eps))
	for i, ep := range eps {
		h := jsonHealth{Endpoint: ep, Health: errs[i] == nil, Took: took[i].Round(10 * time.Microsecond).String(), TookMs: float64(took[i].Microseconds()) / 1000}
		if errs[i] != nil {
			bad++
			h.Error = errorText(errs[i])
		}
		out[i] = h
	}
	if a.JSON() {
		if err := WriteJSON(a.stdout, out); err != nil {
			return err
		}
	} else {
		for _, h := range out {
			if h.Health {
				fmt.Fprintf(a.stdout, "%s is healthy: served a linearizable read: took = %s\n", h.Endpoint, h.Took)
			} else {
				fmt.Fprintf(a.stdout, "%s is unhealthy: failed to serve a linearizable read: %s (after %s)\n", h.Endpoint, h.Error, h.Took)
			}
		}
	}
	if bad > 0 {
		return &client.Error{Kind: client.ErrUnavailable, Msg: fmt.Sprintf("unhealthy cluster: %d of %d endpoints unhealthy", bad, len(eps))}
	}
	return nil
}

// oneEndpoint runs fn on a connection to ep alone.
func (a *App) oneEndpoint(ctx context.Context, ep string, fn func(ctx context.Context, c *client.Client) error) error {
	c, err := client.New(ctx, client.Config{Endpoints: []string{ep}, AutoSyncInterval: -1, DialTimeout: a.timeout, FailFast: true, TLS: a.tls.cfg})
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(ctx, c)
}

// errorText is an error as errorLine prints it, without "Error: ".
func errorText(err error) string { return strings.TrimPrefix(errorLine(err), "Error: ") }

type jsonEndpointStatus struct {
	Endpoint string      `json:"endpoint"`
	Status   *jsonStatus `json:"status,omitempty"`
	TookMs   float64     `json:"took_ms"`
	Error    string      `json:"error,omitempty"`
}

func (a *App) endpointStatus(eps []string) error {
	out := make([]jsonEndpointStatus, len(eps))
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	for i, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].Endpoint = ep
			var took time.Duration
			err := a.oneEndpoint(ctx, ep, func(ctx context.Context, c *client.Client) error {
				start := time.Now()
				st, err := c.Status(ctx)
				took = time.Since(start)
				if err != nil {
					return err
				}
				s := statusOf(st)
				if st.GetLeaderId() != 0 && st.GetLeaderId() != st.GetMemberId() {
					s.LeaderName = memberNames(ctx, c)[st.GetLeaderId()]
				}
				out[i].Status = &s
				return nil
			})
			out[i].TookMs = float64(took.Microseconds()) / 1000
			if err != nil {
				out[i].Error = errorText(err)
			}
		}()
	}
	wg.Wait()
	bad := 0
	for _, o := range out {
		if o.Error != "" {
			bad++
		}
	}
	if a.JSON() {
		if err := WriteJSON(a.stdout, out); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ENDPOINT\tID\tNAME\tVERSION\tDB SIZE\tIS LEADER\tIS LEARNER\tRAFT TERM\tRAFT INDEX\tRAFT APPLIED INDEX\tTOOK\tERRORS")
		for _, o := range out {
			if o.Status == nil {
				fmt.Fprintf(tw, "%s\t\t\t\t\t\t\t\t\t\t\t%s\n", o.Endpoint, o.Error)
				continue
			}
			s := o.Status
			took := (time.Duration(o.TookMs*1000) * time.Microsecond).Round(10 * time.Microsecond)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%v\t%v\t%d\t%d\t%d\t%s\t\n", o.Endpoint, s.MemberID, s.Name, s.Version,
				humanBytes(s.DBSize), s.LeaderID == s.MemberID, s.IsLearner, s.RaftTerm, s.RaftIndex, s.RaftAppliedIndex, took)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if bad > 0 {
		return &client.Error{Kind: client.ErrUnavailable, Msg: fmt.Sprintf("%d of %d endpoints did not answer", bad, len(eps))}
	}
	return nil
}
