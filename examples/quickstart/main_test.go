package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/lockstepgo/lockstep/checkpoint"
)

func TestQuickstart(t *testing.T) {
	var out bytes.Buffer
	var counts Counts
	if err := run(context.Background(), checkpoint.NewMemorySaver(nil), &out, &counts); err != nil {
		t.Fatal(err)
	}
	want := `run 1: waiting, waiting at [approve]: "charge 120 for lamp?"
state: status=waiting next=[approve] log=[priced lamp]
run 2: done, log=[priced lamp approved=true charged 120], charges=1
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	if counts.Charges != 1 {
		t.Errorf("charges = %d, want 1", counts.Charges)
	}
}
