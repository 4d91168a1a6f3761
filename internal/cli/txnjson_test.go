package cli

import (
	"reflect"
	"strings"
	"testing"

	"github.com/dkv-io/dkv/client"
)

func TestParseTxn(t *testing.T) {
	req, err := parseTxn([]byte(`{
		"compare":[
			{"key":"a","target":"value","result":"equal","value":"1"},
			{"key":"b","target":"version","result":">","value":3},
			{"key":"c","target":"mod_revision","result":"less","value":"9007199254740993"},
			{"key":"d","target":"exists","value":true},
			{"key":"e","target":"exists","result":"not_equal","value":true},
			{"key":"f","target":"create","result":"not_equal","value":0}
		],
		"success":[{"put":{"key":"a","value":"2","prev_kv":true}},{"delete":{"key":"p/","prefix":true}}],
		"failure":[{"get":{"key":"a","limit":1}}]
	}`))
	if err != nil {
		t.Fatal(err)
	}
	want := &txnRequest{
		cmps: []client.Cmp{
			client.Value("a").Equal([]byte("1")),
			client.Version("b").Greater(3),
			client.ModRevision("c").Less(9007199254740993),
			client.Exists("d"),
			client.Missing("e"),
			client.CreateRevision("f").NotEqual(0),
		},
		success: []client.Op{
			client.OpPut("a", []byte("2"), client.WithPrevKV()),
			client.OpDelete("p/", client.WithPrefix()),
		},
		fail: []client.Op{client.OpGet("a", client.WithLimit(1))},
	}
	if !reflect.DeepEqual(req, want) {
		t.Fatalf("parsed\n%+v\nwant\n%+v", req, want)
	}
}

func TestParseTxnEmptyIsValid(t *testing.T) {
	req, err := parseTxn([]byte(`{}`))
	if err != nil || len(req.cmps)+len(req.success)+len(req.fail) != 0 {
		t.Fatalf("%+v, %v", req, err)
	}
}

func TestParseTxnErrors(t *testing.T) {
	for in, want := range map[string]string{
		`{"compare":[{"key":"a","target":"value","value":"1"}],"sucess":[]}`:       `unknown field "sucess"`,
		`{"compare":[{"key":"a","target":"colour","value":"1"}]}`:                  `"target" "colour"`,
		`{"compare":[{"key":"a","target":"value","result":"about","value":"1"}]}`:  `"result" "about"`,
		`{"compare":[{"target":"value","value":"1"}]}`:                             `"key" is missing`,
		`{"compare":[{"key":"a","target":"version"}]}`:                             `"value" is missing`,
		`{"compare":[{"key":"a","target":"version","value":"x"}]}`:                 `must be an integer`,
		`{"compare":[{"key":"a","target":"value","value":1}]}`:                     `must be a string`,
		`{"compare":[{"key":"a","target":"exists","result":"less","value":true}]}`: `equal or not_equal`,
		`{"success":[{"put":{"key":"a"},"get":{"key":"a"}}]}`:                      `exactly one of`,
		`{"success":[{}]}`: `exactly one of`,
		`{"failure":[{"get":{"key":"a","prev_kv":true}}]}`: `"prev_kv" is for put and delete`,
		`{"success":[{"delete":{"key":"a","limit":3}}]}`:   `are for get`,
		`{} {}`:          `trailing data`,
		`not json`:       `txn JSON`,
		`{"compare":{}}`: `txn JSON`,
	} {
		_, err := parseTxn([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseTxn(%s) = %v, want error containing %q", in, err, want)
		}
	}
}
