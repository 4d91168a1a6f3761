package exenv

// Connection is the connection flags as parsed by ParseFlags (or Main),
// for a program that starts processes of its own against the same store.
func Connection() Flags { return flags }

// Args are f as command-line arguments, only those set: a child process
// given them connects as its parent did. A password taken from
// DKV_PASSWORD is not among them; the child inherits the environment.
func (f Flags) Args() []string {
	var args []string
	for _, a := range []struct{ name, v string }{
		{"--endpoints", f.Endpoints}, {"--cacert", f.CACert}, {"--cert", f.Cert},
		{"--key", f.Key}, {"--user", f.User},
	} {
		if a.v != "" {
			args = append(args, a.name, a.v)
		}
	}
	return args
}
