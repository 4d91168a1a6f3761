package client

import (
	"context"
	"slices"
	"strings"
	"time"
)

// startAutoSync discovers the cluster's members in the background, at
// once and then every AutoSyncInterval, until Close. Nothing waits for
// it: a request made before the first sync completes uses the configured
// endpoints.
func (c *Client) startAutoSync() {
	c.stopSync = make(chan struct{})
	c.syncDone = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-c.stopSync
		cancel()
	}()
	go func() {
		defer close(c.syncDone)
		defer cancel()
		t := time.NewTicker(c.cfg.AutoSyncInterval)
		defer t.Stop()
		for {
			sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
			_ = c.SyncEndpoints(sctx)
			scancel()
			select {
			case <-c.stopSync:
				return
			case <-t.C:
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
	// The contacted member's view is enough (and needs no quorum): the
	// configured endpoints are kept, and the next sync corrects a stale
	// list.
	resp, err := c.MemberList(ctx, WithSerializable())
	if err != nil {
		return err
	}
	eps := c.Endpoints()
	for _, m := range resp.GetMembers() {
		if u := m.GetClientUrl(); u != "" && !slices.Contains(eps, u) {
			eps = append(eps, u)
		}
	}
	c.epMu.Lock()
	c.discovered = eps
	c.epMu.Unlock()
	c.resolver.UpdateState(resolverState(c.router, eps))
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
