package checkpointtest_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/checkpointtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func full(v, data string) checkpoint.Blob {
	return checkpoint.Blob{Version: v, Data: json.RawMessage(data)}
}

func appended(v, base, items string) checkpoint.Blob {
	return checkpoint.Blob{Version: v, Base: base, Append: true, Data: json.RawMessage(items)}
}

// TestMaterialize: the helper the suite judges savers with accepts every
// well-formed chain, whole or trimmed by Have, and rejects every broken
// one, so a saver cannot pass by returning a partial value.
func TestMaterialize(t *testing.T) {
	tests := []struct {
		name        string
		blobs       []checkpoint.Blob
		heldVersion string
		held        string
		want        string // "" means an error
	}{
		{"one full blob", []checkpoint.Blob{full("v1", ` {"a": 1} `)}, "", "", `{"a":1}`},
		{"full null", []checkpoint.Blob{full("v1", `null`)}, "", "", `null`},
		{"chain", []checkpoint.Blob{full("v1", `[1]`), appended("v2", "v1", `[2,3]`), appended("v3", "v2", `[]`), appended("v4", "v3", `[4]`)}, "", "", `[1,2,3,4]`},
		{"append to nothing", []checkpoint.Blob{appended("v1", "", `["a"]`), appended("v2", "v1", `["b"]`)}, "", "", `["a","b"]`},
		{"append to null", []checkpoint.Blob{full("v1", `null`), appended("v2", "v1", `[1]`)}, "", "", `[1]`},
		{"null items", []checkpoint.Blob{full("v1", `[1]`), appended("v2", "v1", `null`)}, "", "", `[1]`},
		{"trimmed by Have", []checkpoint.Blob{appended("v3", "v2", `[3]`), appended("v4", "v3", `[4]`)}, "v2", `[1,2]`, `[1,2,3,4]`},
		{"whole chain though Have was given", []checkpoint.Blob{full("v1", `[1]`), appended("v2", "v1", `[2]`)}, "v1", `["ignored"]`, `[1,2]`},
		{"empty chain", nil, "", "", ""},
		{"starts at an append the reader does not hold", []checkpoint.Blob{appended("v3", "v2", `[3]`)}, "", "", ""},
		{"starts at an append on another held version", []checkpoint.Blob{appended("v3", "v2", `[3]`)}, "v1", `[1]`, ""},
		{"broken link", []checkpoint.Blob{full("v1", `[1]`), appended("v3", "v2", `[3]`)}, "", "", ""},
		{"replacement mid-chain", []checkpoint.Blob{full("v1", `[1]`), full("v2", `[2]`)}, "", "", ""},
		{"invalid JSON", []checkpoint.Blob{full("v1", `[1`)}, "", "", ""},
		{"empty data", []checkpoint.Blob{full("v1", ``)}, "", "", ""},
		{"append to an object", []checkpoint.Blob{full("v1", `{}`), appended("v2", "v1", `[1]`)}, "", "", ""},
		{"append a non-array", []checkpoint.Blob{full("v1", `[]`), appended("v2", "v1", `1`)}, "", "", ""},
		{"invalid held value", []checkpoint.Blob{appended("v3", "v2", `[3]`)}, "v2", `[1`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := checkpointtest.Materialize(tc.blobs, tc.heldVersion, json.RawMessage(tc.held))
			if tc.want == "" {
				if err == nil {
					t.Errorf("Materialize = %s, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Materialize: %v", err)
			}
			if string(got) != tc.want {
				t.Errorf("Materialize = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestValues(t *testing.T) {
	cp := checkpoint.Checkpoint{
		Versions: map[string]string{"a": "v2", "b": "v1", "c": "v2"},
		Channels: map[string][]checkpoint.Blob{
			"a": {full("v1", `[1]`), appended("v2", "v1", `[2]`)},
			"c": {appended("v2", "v1", `[2]`)},
		},
	}
	held := map[string]checkpointtest.Held{
		"b": {Version: "v1", Value: json.RawMessage(`"held"`)},
		"c": {Version: "v1", Value: json.RawMessage(`[1]`)},
	}
	got, err := checkpointtest.Values(cp, held)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]json.RawMessage{"a": json.RawMessage(`[1,2]`), "b": json.RawMessage(`"held"`), "c": json.RawMessage(`[1,2]`)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Values (-want +got):\n%s", diff)
	}
	bad := []struct {
		name string
		cp   checkpoint.Checkpoint
		held map[string]checkpointtest.Held
	}{
		{"missing channel", checkpoint.Checkpoint{Versions: map[string]string{"a": "v1"}}, nil},
		{"held at another version", checkpoint.Checkpoint{Versions: map[string]string{"a": "v2"}}, map[string]checkpointtest.Held{"a": {Version: "v1", Value: json.RawMessage(`1`)}}},
		{"chain ends elsewhere", checkpoint.Checkpoint{Versions: map[string]string{"a": "v2"}, Channels: map[string][]checkpoint.Blob{"a": {full("v1", `1`)}}}, nil},
		{"blobs without version", checkpoint.Checkpoint{Channels: map[string][]checkpoint.Blob{"a": {full("v1", `1`)}}}, nil},
	}
	for _, tc := range bad {
		if got, err := checkpointtest.Values(tc.cp, tc.held); err == nil {
			t.Errorf("Values(%s) = %s, want an error", tc.name, got)
		}
	}
}

// A reader that holds a list at version v2 asked the saver for v4 with
// GetOptions.Have; the saver returned only the blobs after v2.
func ExampleMaterialize() {
	chain := []checkpoint.Blob{
		{Version: "v3", Base: "v2", Append: true, Data: json.RawMessage(`["c"]`)},
		{Version: "v4", Base: "v3", Append: true, Data: json.RawMessage(`["d"]`)},
	}
	v, err := checkpointtest.Materialize(chain, "v2", json.RawMessage(`["a","b"]`))
	fmt.Println(string(v), err)
	_, err = checkpointtest.Materialize(chain, "", nil)
	fmt.Println(err != nil)
	// Output:
	// ["a","b","c","d"] <nil>
	// true
}
