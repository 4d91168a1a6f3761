package main

// scenario is one row of the driver's table: which example to run, its
// instances and their arguments, and the fault to play on them.
type scenario struct {
	name  string // the example's folder under examples/
	about string // what the run shows, in a line
	// instances are the names of the instance processes, started in
	// order; args are given to each (after --endpoints and --run), extra
	// to the one named.
	instances []string
	args      []string
	extra     map[string][]string
	// fault plays the scenario once the instances are started: it waits
	// for their events, signals them, and says what came of it. The
	// driver then stops the instances with SIGTERM and the cluster.
	fault func(d *driver) error
}

// scenarios is the table. A new one is a row here and its fault script
// in a file of its own.
var scenarios = []scenario{
	{
		name:      "cart",
		about:     "three shop instances keep carts in the store behind a round-robin proxy process; two shopper processes add 50 items each to one cart at once; one instance is killed with kill -9 midway",
		instances: []string{"A", "B", "C"},
		fault:     cart,
	},
	{
		name:      "scheduled-job",
		about:     "three workers elect a leader that runs a job once per second; the leader is killed with kill -9, the next one frozen with SIGSTOP past its 2s TTL",
		instances: []string{"w1", "w2", "w3"},
		args:      []string{"--period", "1s", "--ttl", "2s"},
		fault:     scheduledJob,
	},
	{
		name:      "reconcile",
		about:     "three reconcilers, one leading, keep services (child processes they start) as desired in the store (2s TTL); a child is killed with kill -9, then the leader in the middle of a round",
		instances: []string{"ctl-a", "ctl-b", "ctl-c"},
		args:      []string{"--ttl", "2s"},
		fault:     reconcile,
	},
	{
		name:      "canary",
		about:     "two controllers (one leads, 2s TTL) roll a canary out behind a flag over real traffic (a proxy process routing by the flag, a load generator); after the first decision the canary starts failing 5% of requests and the leading controller is killed with kill -9",
		instances: []string{"controller-a", "controller-b", "baseline", "canary"},
		fault:     canary,
	},
	{
		name:      "react",
		about:     "three consumers react to changes by a watch, each keeping its checkpoint (the last revision handled) in the store; one is killed with kill -9 mid-stream and started again",
		instances: []string{"r1", "r2", "r3"},
		fault:     react,
	},
	{
		name:      "invoices",
		about:     "three workers pay 12 invoices under store-enforced locks (3s TTL, 1s of work each); one holding a lock is killed with kill -9, another frozen with SIGSTOP",
		instances: []string{"w1", "w2", "w3"},
		args:      []string{"--invoices", "12", "--lock-ttl", "3s", "--work", "1s"},
		fault:     invoices,
	},
	{
		name:      "jobqueue",
		about:     "three consumers charge 10 invoices from a queue (2s visibility timeout, renewed while working); one is killed with kill -9 after claiming a job, another after charging one but before acking it",
		instances: []string{"w1", "w2", "w3"},
		args:      []string{"--visibility", "2s", "--work", "2s"},
		extra:     map[string][]string{"w1": {"--enqueue", "10"}},
		fault:     jobqueue,
	},
	{
		name:      "presence",
		about:     "three nodes register in a group and watch it (3s session TTL); one is killed with kill -9, then started again",
		instances: []string{"node-1", "node-2", "node-3"},
		args:      []string{"--ttl", "3s"},
		fault:     presence,
	},
	{
		name:      "ratelimit-api",
		about:     "three instances of an HTTP API share one rate limit (10/s, burst 5) kept in the store; a callers process spreads requests over them; one instance is killed with kill -9 and started again",
		instances: []string{"A", "B", "C"},
		fault:     ratelimit,
	},
}
