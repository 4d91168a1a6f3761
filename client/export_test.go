package client

// SetMaxWatchQueue sets how far a watch may fall behind before it is
// paused on the server, for a test; the returned func restores it.
func SetMaxWatchQueue(n int) (restore func()) {
	old := maxWatchQueue
	maxWatchQueue = n
	return func() { maxWatchQueue = old }
}

// LeaderKnown reports whether c's router knows which endpoint leads, for
// a test that must wait for it (the client learns it from status probes
// while it is busy).
func LeaderKnown(c *Client) bool {
	return c.router != nil && c.router.routes.Load().leader != ""
}
