package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/client"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// credentials resolves --user NAME[:PASSWORD] (env DKV_USER, DKV_PASSWORD):
// a missing password is asked for when stdin is a terminal.
func (a *App) credentials() (string, string, error) {
	if a.creds != nil {
		return a.creds[0], a.creds[1], nil
	}
	name, pw, err := a.askCredentials()
	if err == nil {
		a.creds = &[2]string{name, pw}
	}
	return name, pw, err
}

func (a *App) askCredentials() (string, string, error) {
	u := a.user
	if u == "" {
		u = os.Getenv("DKV_USER")
	}
	if u == "" {
		return "", "", nil
	}
	name, pw, ok := strings.Cut(u, ":")
	if !ok {
		pw = os.Getenv("DKV_PASSWORD")
	}
	if name == "" {
		return "", "", Usagef("--user %q has no user name", u)
	}
	if pw == "" {
		p, err := a.readPassword(fmt.Sprintf("Password for %s: ", name))
		if err != nil {
			return "", "", err
		}
		pw = p
	}
	return name, pw, nil
}

// readPassword prompts on stderr and reads a password without echo from a
// terminal; from anything else it refuses rather than read a script's
// input as a password.
func (a *App) readPassword(prompt string) (string, error) {
	f, ok := a.stdin.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		// Reached only by a login's password (credentials): the
		// commands that set one (user add, passwd) read a script's
		// stdin themselves.
		return "", Usagef("no password given and stdin is not a terminal: use --user NAME:PASSWORD or set DKV_PASSWORD")
	}
	fmt.Fprint(a.stderr, prompt)
	b, err := term.ReadPassword(int(f.Fd()))
	fmt.Fprintln(a.stderr)
	return string(b), err
}

func (a *App) ok(what string) error {
	if a.JSON() {
		return WriteJSON(a.stdout, map[string]string{"ok": what})
	}
	fmt.Fprintln(a.stdout, what)
	return nil
}

func (a *App) userCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "user", Short: "Manage users (root only once auth is enabled)"}
	var password string
	add := &cobra.Command{
		Use:   "add NAME",
		Short: "Add a user; the password comes from --password or a prompt",
		Args:  Args(cobra.ExactArgs(1)),
		RunE: func(_ *cobra.Command, argv []string) error {
			pw, err := a.newPassword(password, argv[0])
			if err != nil {
				return err
			}
			return a.run(func(ctx context.Context, c *client.Client) error {
				if err := c.UserAdd(ctx, argv[0], pw); err != nil {
					return err
				}
				return a.ok("User " + argv[0] + " added")
			})
		},
	}
	add.Flags().StringVar(&password, "password", "", "the password (default: prompt)")
	passwd := &cobra.Command{
		Use:   "passwd NAME",
		Short: "Change a user's password",
		Args:  Args(cobra.ExactArgs(1)),
		RunE: func(_ *cobra.Command, argv []string) error {
			pw, err := a.newPassword(password, argv[0])
			if err != nil {
				return err
			}
			return a.run(func(ctx context.Context, c *client.Client) error {
				if err := c.UserChangePassword(ctx, argv[0], pw); err != nil {
					return err
				}
				return a.ok("Password updated")
			})
		},
	}
	passwd.Flags().StringVar(&password, "password", "", "the new password (default: prompt)")
	cmd.AddCommand(add, passwd,
		a.simple("delete NAME", "Delete a user", 1, func(ctx context.Context, c *client.Client, v []string) (string, error) {
			return "User " + v[0] + " deleted", c.UserDelete(ctx, v[0])
		}),
		a.simple("grant-role NAME ROLE", "Grant a role to a user", 2, func(ctx context.Context, c *client.Client, v []string) (string, error) {
			return "Role " + v[1] + " is granted to user " + v[0], c.UserGrantRole(ctx, v[0], v[1])
		}),
		a.simple("revoke-role NAME ROLE", "Revoke a role from a user", 2, func(ctx context.Context, c *client.Client, v []string) (string, error) {
			return "Role " + v[1] + " is revoked from user " + v[0], c.UserRevokeRole(ctx, v[0], v[1])
		}),
		&cobra.Command{
			Use: "get NAME", Short: "Show a user's roles", Args: Args(cobra.ExactArgs(1)),
			RunE: func(_ *cobra.Command, argv []string) error {
				return a.run(func(ctx context.Context, c *client.Client) error {
					u, err := c.UserGet(ctx, argv[0])
					if err != nil {
						return err
					}
					if a.JSON() {
						return WriteJSON(a.stdout, map[string]any{"name": u.GetName(), "roles": nonNil(u.GetRoles())})
					}
					fmt.Fprintf(a.stdout, "User: %s\nRoles: %s\n", u.GetName(), strings.Join(u.GetRoles(), " "))
					return nil
				})
			},
		},
		a.list("list", "List users", func(ctx context.Context, c *client.Client) ([]string, error) { return c.UserList(ctx) }, "users"),
	)
	return cmd
}

// newPassword is --password, or a password asked twice on a terminal.
func (a *App) newPassword(flag, user string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if f, ok := a.stdin.(*os.File); !ok || !term.IsTerminal(int(f.Fd())) {
		// A script pipes the password in: one line.
		line, err := bufio.NewReader(a.stdin).ReadString('\n')
		if err != nil && err != io.EOF {
			return "", err
		}
		if line = strings.TrimRight(line, "\r\n"); line == "" {
			return "", Usagef("no password: give --password or pipe it on stdin")
		}
		return line, nil
	}
	p1, err := a.readPassword("Password of " + user + ": ")
	if err != nil {
		return "", err
	}
	p2, err := a.readPassword("Type password of " + user + " again for confirmation: ")
	if err != nil {
		return "", err
	}
	if p1 != p2 {
		return "", Usagef("the passwords do not match")
	}
	return p1, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// simple is a command of n arguments that prints one line on success.
func (a *App) simple(use, short string, n int, fn func(context.Context, *client.Client, []string) (string, error)) *cobra.Command {
	return &cobra.Command{
		Use: use, Short: short, Args: Args(cobra.ExactArgs(n)),
		RunE: func(_ *cobra.Command, argv []string) error {
			return a.run(func(ctx context.Context, c *client.Client) error {
				msg, err := fn(ctx, c, argv)
				if err != nil {
					return err
				}
				return a.ok(msg)
			})
		},
	}
}

func (a *App) list(use, short string, fn func(context.Context, *client.Client) ([]string, error), key string) *cobra.Command {
	return &cobra.Command{
		Use: use, Short: short, Args: Args(cobra.NoArgs),
		RunE: func(_ *cobra.Command, _ []string) error {
			return a.run(func(ctx context.Context, c *client.Client) error {
				names, err := fn(ctx, c)
				if err != nil {
					return err
				}
				if a.JSON() {
					return WriteJSON(a.stdout, map[string][]string{key: nonNil(names)})
				}
				for _, n := range names {
					fmt.Fprintln(a.stdout, n)
				}
				return nil
			})
		},
	}
}

var permTypes = map[string]dkvpb.Permission_Type{
	"read": dkvpb.Permission_READ, "write": dkvpb.Permission_WRITE, "readwrite": dkvpb.Permission_READWRITE,
}

func (a *App) roleCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "role", Short: "Manage roles and their permissions (root only once auth is enabled)"}
	var prefix, fromKey bool
	grant := &cobra.Command{
		Use:   "grant-permission ROLE read|write|readwrite KEY [END]",
		Short: "Allow a role to read and/or write KEY, [KEY, END), or every key with prefix KEY (--prefix)",
		Args:  Args(cobra.RangeArgs(3, 4)),
		RunE: func(_ *cobra.Command, argv []string) error {
			typ, ok := permTypes[strings.ToLower(argv[1])]
			if !ok {
				return Usagef("permission %q: must be read, write or readwrite", argv[1])
			}
			end, err := permEnd(argv[3:], prefix, fromKey)
			if err != nil {
				return err
			}
			return a.run(func(ctx context.Context, c *client.Client) error {
				if err := c.RoleGrantPermission(ctx, argv[0], typ, argv[2], end, prefix); err != nil {
					return err
				}
				return a.ok("Role " + argv[0] + " updated")
			})
		},
	}
	grant.Flags().BoolVar(&prefix, "prefix", false, "KEY is a prefix: every key starting with it")
	grant.Flags().BoolVar(&fromKey, "from-key", false, "every key >= KEY")
	revoke := &cobra.Command{
		Use:   "revoke-permission ROLE KEY [END]",
		Short: "Remove the permission granted on KEY [END] (or --prefix KEY)",
		Args:  Args(cobra.RangeArgs(2, 3)),
		RunE: func(_ *cobra.Command, argv []string) error {
			end, err := permEnd(argv[2:], prefix, fromKey)
			if err != nil {
				return err
			}
			return a.run(func(ctx context.Context, c *client.Client) error {
				if err := c.RoleRevokePermission(ctx, argv[0], argv[1], end, prefix); err != nil {
					return err
				}
				return a.ok("Permission of role " + argv[0] + " revoked")
			})
		},
	}
	revoke.Flags().BoolVar(&prefix, "prefix", false, "KEY is a prefix")
	revoke.Flags().BoolVar(&fromKey, "from-key", false, "the permission is on every key >= KEY")
	cmd.AddCommand(grant, revoke,
		a.simple("add ROLE", "Add a role", 1, func(ctx context.Context, c *client.Client, v []string) (string, error) {
			return "Role " + v[0] + " created", c.RoleAdd(ctx, v[0])
		}),
		a.simple("delete ROLE", "Delete a role (and revoke it from every user)", 1, func(ctx context.Context, c *client.Client, v []string) (string, error) {
			return "Role " + v[0] + " deleted", c.RoleDelete(ctx, v[0])
		}),
		&cobra.Command{
			Use: "get ROLE", Short: "Show a role's permissions", Args: Args(cobra.ExactArgs(1)),
			RunE: func(_ *cobra.Command, argv []string) error {
				return a.run(func(ctx context.Context, c *client.Client) error {
					r, err := c.RoleGet(ctx, argv[0])
					if err != nil {
						return err
					}
					type perm struct {
						Type     string `json:"type"`
						Key      string `json:"key"`
						RangeEnd string `json:"range_end,omitempty"`
						Store    string `json:"store,omitempty"`
					}
					var ps []perm
					for _, p := range r.GetPermissions() {
						ps = append(ps, perm{strings.ToLower(p.GetType().String()), string(p.GetKey()), string(p.GetRangeEnd()), p.GetStore()})
					}
					if a.JSON() {
						return WriteJSON(a.stdout, map[string]any{"name": r.GetName(), "permissions": ps})
					}
					fmt.Fprintf(a.stdout, "Role %s\n", r.GetName())
					if r.GetName() == "root" {
						fmt.Fprintln(a.stdout, "May do everything.")
						return nil
					}
					for _, p := range ps {
						if p.Store != "" {
							fmt.Fprintf(a.stdout, "\tin store %s:", p.Store)
						}
						switch {
						case p.RangeEnd == "":
							fmt.Fprintf(a.stdout, "\t%s\t%q\n", p.Type, p.Key)
						case p.RangeEnd == "\x00":
							fmt.Fprintf(a.stdout, "\t%s\t[%q, <open ended>)\n", p.Type, p.Key)
						default:
							fmt.Fprintf(a.stdout, "\t%s\t[%q, %q)\n", p.Type, p.Key, p.RangeEnd)
						}
					}
					return nil
				})
			},
		},
		a.list("list", "List roles", func(ctx context.Context, c *client.Client) ([]string, error) { return c.RoleList(ctx) }, "roles"),
	)
	return cmd
}

func permEnd(rest []string, prefix, fromKey bool) (string, error) {
	switch {
	case prefix && fromKey:
		return "", Usagef("--prefix and --from-key exclude each other")
	case len(rest) > 0 && (prefix || fromKey):
		return "", Usagef("END cannot be given with --prefix or --from-key")
	case fromKey:
		return "\x00", nil
	case len(rest) > 0:
		return rest[0], nil
	}
	return "", nil
}

func (a *App) authCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "auth", Short: "Turn authentication on or off, or show whether it is on"}
	cmd.AddCommand(
		a.simple("enable", "Enable auth (refused until user root holds role root)", 0, func(ctx context.Context, c *client.Client, _ []string) (string, error) {
			return "Authentication Enabled", c.AuthEnable(ctx)
		}),
		a.simple("disable", "Disable auth", 0, func(ctx context.Context, c *client.Client, _ []string) (string, error) {
			return "Authentication Disabled", c.AuthDisable(ctx)
		}),
		&cobra.Command{
			Use: "status", Short: "Show whether auth is enabled and the auth revision", Args: Args(cobra.NoArgs),
			RunE: func(_ *cobra.Command, _ []string) error {
				return a.run(func(ctx context.Context, c *client.Client) error {
					st, err := c.AuthStatus(ctx)
					if err != nil {
						return err
					}
					if a.JSON() {
						return WriteJSON(a.stdout, map[string]any{"enabled": st.GetEnabled(), "auth_revision": st.GetAuthRevision()})
					}
					fmt.Fprintf(a.stdout, "Authentication Status: %v\nAuthRevision: %d\n", st.GetEnabled(), st.GetAuthRevision())
					return nil
				})
			},
		},
	)
	return cmd
}
