package client

import (
	"context"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/resolver"
)

// startAutoSync discovers the cluster's members now (best effort) and then
// every AutoSyncInterval, until Close.
func (c *Client) startAutoSync() {
	c.stopSync = make(chan struct{})
	c.syncDone = make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = c.SyncEndpoints(ctx)
	cancel()
	go func() {
		defer close(c.syncDone)
		t := time.NewTicker(c.cfg.AutoSyncInterval)
		defer t.Stop()
		for {
			select {
			case <-c.stopSync:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = c.SyncEndpoints(ctx)
				cancel()
			}
		}
	}()
}

// SyncEndpoints asks the cluster for its members and balances requests
// over the configured endpoints plus every member's published client URL.
// Configured endpoints are never dropped, so a client can always fall back
// to what it was given.
func (c *Client) SyncEndpoints(ctx context.Context) error {
	if c.resolver == nil {
		return nil // embedded: one in-process node
	}
	resp, err := c.MemberList(ctx)
	if err != nil {
		return err
	}
	eps := c.Endpoints()
	for _, m := range resp.GetMembers() {
		if u := m.GetClientUrl(); u != "" && !slices.Contains(eps, u) {
			eps = append(eps, u)
		}
	}
	addrs := make([]resolver.Address, len(eps))
	for i, e := range eps {
		addrs[i] = resolver.Address{Addr: e}
	}
	c.epMu.Lock()
	c.discovered = eps
	c.epMu.Unlock()
	c.resolver.UpdateState(resolver.State{Addresses: addrs})
	return nil
}

// Endpoints returns the endpoints the client balances over: the configured
// ones, then those discovered from the member list.
func (c *Client) Endpoints() []string {
	c.epMu.Lock()
	defer c.epMu.Unlock()
	if c.discovered != nil {
		return slices.Clone(c.discovered)
	}
	out := make([]string, len(c.cfg.Endpoints))
	for i, e := range c.cfg.Endpoints {
		out[i] = strings.TrimSpace(e)
	}
	return out
}
