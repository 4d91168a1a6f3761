package servercmd

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestServeLogFormat: --log-format json gives one JSON object a line with
// the message and attributes; text gives key=value; anything else is a
// usage error naming the choices, before anything starts.
func TestServeLogFormat(t *testing.T) {
	var buf bytes.Buffer
	l, err := newServeLogger(&buf, "json")
	if err != nil {
		t.Fatal(err)
	}
	l.Info("stopping: leadership handed over", "to", "n2")
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("--log-format json wrote %q: %v", buf.String(), err)
	}
	if rec["msg"] != "stopping: leadership handed over" || rec["to"] != "n2" || rec["level"] != "INFO" || rec["time"] == nil {
		t.Errorf("JSON record %v", rec)
	}
	buf.Reset()
	if l, err = newServeLogger(&buf, "text"); err != nil {
		t.Fatal(err)
	}
	l.Info("ready", "to", "n2")
	if got := buf.String(); !strings.Contains(got, `msg=ready to=n2`) {
		t.Errorf("--log-format text wrote %q", got)
	}
	var stdout, stderr bytes.Buffer
	code := Server.Run([]string{"serve", "--data-dir", t.TempDir(), "--log-format", "xml"}, nil, &stdout, &stderr)
	if code != exitUsage || !strings.Contains(stderr.String(), `--log-format "xml": want text or json`) {
		t.Errorf("serve --log-format xml: exit %d, stderr %q", code, stderr.String())
	}
}
