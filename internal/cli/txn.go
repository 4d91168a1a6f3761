package cli

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/dkv-io/dkv/client"
	"github.com/spf13/cobra"
)

type jsonOpResult struct {
	Get    *jsonRange  `json:"get,omitempty"`
	Put    *jsonPut    `json:"put,omitempty"`
	Delete *jsonDelete `json:"delete,omitempty"`
}

type jsonTxn struct {
	Succeeded bool           `json:"succeeded"`
	Revision  int64          `json:"revision"`
	Responses []jsonOpResult `json:"responses"`
}

func (a *App) txnCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "txn [FILE]",
		Short: "Run a transaction read as JSON from FILE or stdin",
		Long: `Run a transaction: if every compare holds, the success ops run, otherwise
the failure ops, atomically as one revision. The JSON format:

  {"compare":[{"key":"a","target":"value","result":"equal","value":"1"}],
   "success":[{"put":{"key":"a","value":"2"}}],
   "failure":[{"get":{"key":"a"}}]}

targets: value (string), version, create_revision, mod_revision (integers),
exists (true/false); results: equal, not_equal, greater, less. Ops: put
{key, value, lease, prev_kv}, get {key, range_end, prefix, limit, revision,
keys_only}, delete {key, range_end, prefix, prev_kv}.

Prints SUCCESS or FAILURE, then each op's result (put: OK; get: key and
value lines; delete: the count). Both outcomes exit 0. Malformed JSON
exits 2.`,
		Args: Args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			var data []byte
			var err error
			if len(argv) == 1 && argv[0] != "-" {
				data, err = os.ReadFile(argv[0])
			} else {
				data, err = io.ReadAll(a.stdin)
			}
			if err != nil {
				return fmt.Errorf("reading txn: %w", err)
			}
			req, err := parseTxn(data)
			if err != nil {
				return usageError{err}
			}
			return a.run(func(ctx context.Context, c *client.Client) error {
				res, err := c.Txn(ctx).If(req.cmps...).Then(req.success...).Else(req.fail...).Commit()
				if err != nil {
					return err
				}
				if a.JSON() {
					out := jsonTxn{Succeeded: res.Succeeded, Revision: res.Revision, Responses: []jsonOpResult{}}
					for _, r := range res.Responses {
						var o jsonOpResult
						switch {
						case r.Get != nil:
							o.Get = toJSONRange(r.Get)
						case r.Put != nil:
							o.Put = &jsonPut{Revision: r.Put.Revision, PrevKV: toJSONKV(r.Put.PrevKV)}
						case r.Delete != nil:
							o.Delete = &jsonDelete{Revision: r.Delete.Revision, Deleted: r.Delete.Deleted, PrevKVs: toJSONKVs(r.Delete.PrevKVs)}
						}
						out.Responses = append(out.Responses, o)
					}
					return WriteJSON(a.stdout, out)
				}
				if res.Succeeded {
					fmt.Fprintln(a.stdout, "SUCCESS")
				} else {
					fmt.Fprintln(a.stdout, "FAILURE")
				}
				for _, r := range res.Responses {
					switch {
					case r.Get != nil:
						writeKVs(a.stdout, r.Get.KVs, false)
					case r.Put != nil:
						fmt.Fprintln(a.stdout, "OK")
						if r.Put.PrevKV != nil {
							writeKVs(a.stdout, []*client.KeyValue{r.Put.PrevKV}, false)
						}
					case r.Delete != nil:
						fmt.Fprintln(a.stdout, r.Delete.Deleted)
						writeKVs(a.stdout, r.Delete.PrevKVs, false)
					}
				}
				return nil
			})
		},
	}
}
