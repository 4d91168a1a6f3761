package state

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
)

// nextAttemptRef is nextAttempt as it was (three decodings of v): the
// bytes it wrote are a stored format, so the faster one must match it.
func nextAttemptRef(v []byte) ([]byte, int64, bool) {
	attempt, maxAttempts := attemptOf(v)
	if attempt < 0 || attempt >= maxAttempts {
		return nil, 0, false
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(v, &obj) != nil {
		return nil, 0, false
	}
	obj["attempt"] = json.RawMessage(strconv.FormatInt(attempt+1, 10))
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, 0, false
	}
	a, _ := attemptOf(out)
	return out, a, true
}

func TestNextAttemptMatchesReference(t *testing.T) {
	inputs := []string{
		`{"id":"x","payload":"aGVsbG8=","run_at_ms":1,"enqueued_ms":1,"max_attempts":10}`,
		`{"id":"x","attempt":3,"max_attempts":10,"last_error":"<b>&</b>"}`,
		`{"attempt":9,"max_attempts":10}`,
		`{"attempt":10,"max_attempts":10}`,
		`{"max_attempts":0}`,
		`{}`, `null`, `[]`, `3`, `"s"`, `{`, ``,
		`{"attempt":"x","max_attempts":3}`,
		`{"attempt":1.5,"max_attempts":3}`,
		`{"attempt":null,"max_attempts":3}`,
		`{"attempt":1,"max_attempts":null}`,
		`{"Attempt":1,"max_attempts":3}`,
		`{"ATTEMPT":2,"MAX_ATTEMPTS":3}`,
		`{"attempt":1,"Attempt":2,"max_attempts":5}`,
		`{"Attempt":2,"attempt":1,"max_attempts":5}`,
		`{"max_attempts":5,"MAX_attempts":1}`,
		"{\"max_attempts\":5,\"\u212a\":1}",
		`{"attempt":99999999999999999999,"max_attempts":3}`,
		`{"attempt":-2,"max_attempts":3}`,
		`{ "b" : [1, 2, {"c": "d"}] , "a": true, "max_attempts": 4 }`,
		`{"x":"\u00e9\u2028","max_attempts":4}`,
		`{"dup":1,"dup":2,"max_attempts":4}`,
	}
	for _, in := range inputs {
		got, ga, gok := nextAttempt([]byte(in))
		want, wa, wok := nextAttemptRef([]byte(in))
		if gok != wok || ga != wa || !bytes.Equal(got, want) {
			t.Errorf("%s: got %s %d %v, want %s %d %v", in, got, ga, gok, want, wa, wok)
		}
	}
}

func FuzzNextAttempt(f *testing.F) {
	f.Add([]byte(`{"attempt":1,"max_attempts":3,"payload":"eA=="}`))
	f.Add([]byte(`{"Attempt":1,"attempt":2,"max_attempts":3}`))
	f.Fuzz(func(t *testing.T, v []byte) {
		got, ga, gok := nextAttempt(v)
		want, wa, wok := nextAttemptRef(v)
		if gok != wok || ga != wa || !bytes.Equal(got, want) {
			t.Fatalf("%q: got %s %d %v, want %s %d %v", v, got, ga, gok, want, wa, wok)
		}
	})
}
