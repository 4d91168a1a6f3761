package runner

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is what one run measured. Its JSON form is the `-o json` output of
// `dkv bench` and what bench/compare reads.
type Result struct {
	Workload string `json:"workload"`
	System   string `json:"system,omitempty"`
	Clients  int    `json:"clients"`
	Conns    int    `json:"conns,omitempty"`
	// Route is how the requests were routed over the cluster's members:
	// "leader" (writes and lease keep-alive streams to the leader, reads
	// spread) or "spread" (everything spread; followers forward writes).
	// Empty for systems without the choice.
	Route string `json:"route,omitempty"`
	// Params records the workload's settings (keys, value size, ...).
	Params map[string]any `json:"params,omitempty"`
	// Elapsed is from the first op's start to the last worker's stop.
	Elapsed time.Duration `json:"-"`
	// Ops is every completed op: OK plus the sum of Errors.
	Ops int64 `json:"ops"`
	OK  int64 `json:"ok"`
	// OpsPerSec counts successful ops only, so a system failing fast does
	// not look fast.
	OpsPerSec float64 `json:"ops_per_sec"`
	// Errors counts failed ops by status name (DKV code, or "grpc:X").
	Errors map[string]int64 `json:"errors"`
	// Latency of the successful ops.
	Latency Latency `json:"latency"`
	// Extra holds workload-specific metrics (e.g. a watch workload's
	// events/s), set by a Finisher.
	Extra map[string]float64 `json:"extra,omitempty"`
}

// Latency summarises a histogram. Values are durations; JSON carries them
// as milliseconds (float) in the *_ms fields.
type Latency struct {
	Mean time.Duration
	P50  time.Duration
	P90  time.Duration
	P99  time.Duration
	P999 time.Duration
	Max  time.Duration
}

type latencyJSON struct {
	Mean float64 `json:"mean_ms"`
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	P999 float64 `json:"p999_ms"`
	Max  float64 `json:"max_ms"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fromMS(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

// MarshalJSON writes the latencies in milliseconds.
func (l Latency) MarshalJSON() ([]byte, error) {
	return json.Marshal(latencyJSON{ms(l.Mean), ms(l.P50), ms(l.P90), ms(l.P99), ms(l.P999), ms(l.Max)})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (l *Latency) UnmarshalJSON(b []byte) error {
	var j latencyJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*l = Latency{fromMS(j.Mean), fromMS(j.P50), fromMS(j.P90), fromMS(j.P99), fromMS(j.P999), fromMS(j.Max)}
	return nil
}

type resultJSON Result

type resultWire struct {
	resultJSON
	ElapsedSeconds float64 `json:"elapsed_seconds"`
}

// MarshalJSON adds elapsed_seconds.
func (r Result) MarshalJSON() ([]byte, error) {
	return json.Marshal(resultWire{resultJSON(r), r.Elapsed.Seconds()})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (r *Result) UnmarshalJSON(b []byte) error {
	var w resultWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*r = Result(w.resultJSON)
	r.Elapsed = time.Duration(w.ElapsedSeconds * float64(time.Second))
	return nil
}

func (r *Result) setLatency(h *Histogram) {
	r.Latency = Latency{
		Mean: h.Mean(),
		P50:  h.Quantile(0.50),
		P90:  h.Quantile(0.90),
		P99:  h.Quantile(0.99),
		P999: h.Quantile(0.999),
		Max:  h.Max(),
	}
}

// ErrorCount is the number of failed ops.
func (r *Result) ErrorCount() int64 { return r.Ops - r.OK }

// WriteJSON writes r as indented JSON.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes r as one table.
func (r *Result) WriteText(w io.Writer) error {
	if r.Route != "" {
		if _, err := fmt.Fprintf(w, "route: %s\n", routeText(r)); err != nil {
			return err
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tCLIENTS\tOPS\tOPS/S\tP50\tP90\tP99\tP99.9\tMAX\tERRORS")
	fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\n",
		r.Workload, r.Clients, r.Ops, r.OpsPerSec,
		FormatLatency(r.Latency.P50), FormatLatency(r.Latency.P90), FormatLatency(r.Latency.P99),
		FormatLatency(r.Latency.P999), FormatLatency(r.Latency.Max), r.errorsString())
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Extra) == 0 {
		return nil
	}
	names := make([]string, 0, len(r.Extra))
	for k := range r.Extra {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if _, err := fmt.Fprintf(w, "%s: %.6g\n", k, r.Extra[k]); err != nil {
			return err
		}
	}
	return nil
}

// routeText describes r.Route for the text output's header.
func routeText(r *Result) string {
	s := r.Route
	switch r.Route {
	case "leader":
		s += " (writes and lease keep-alive streams to the leader"
		if l, ok := r.Params["leader"].(string); ok && l != "" {
			s += " " + l
		}
		s += "; reads and watches spread over the endpoints)"
	case "spread":
		s += " (every connection spread over the endpoints; followers forward writes to the leader)"
		if req, ok := r.Params["route_requested"].(string); ok && req != r.Route {
			s += "; " + req + " was asked for but the leader could not be found"
		}
	}
	return s
}

func (r *Result) errorsString() string {
	if len(r.Errors) == 0 {
		return "0"
	}
	names := make([]string, 0, len(r.Errors))
	for k := range r.Errors {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s=%d", k, r.Errors[k])
	}
	return strings.Join(parts, ",")
}

// FormatLatency prints d in ms with three significant-ish digits.
func FormatLatency(d time.Duration) string {
	m := ms(d)
	switch {
	case m >= 100:
		return fmt.Sprintf("%.0fms", m)
	case m >= 10:
		return fmt.Sprintf("%.1fms", m)
	default:
		return fmt.Sprintf("%.2fms", m)
	}
}
