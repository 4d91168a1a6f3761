package client

// SetMaxWatchQueue sets how far a watch may fall behind before it is
// paused on the server, for a test; the returned func restores it.
func SetMaxWatchQueue(n int) (restore func()) {
	old := maxWatchQueue
	maxWatchQueue = n
	return func() { maxWatchQueue = old }
}
