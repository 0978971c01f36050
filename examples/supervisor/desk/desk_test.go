package desk_test

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/lockstepgo/lockstep/examples/supervisor/desk"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The refund inside the billing subgraph waits for an approval; the
// worker's resume by ID reaches it, the refund happens once, and triage
// never runs again. A second run on the same file repeats nothing.
func TestRun(t *testing.T) {
	db := filepath.Join(t.TempDir(), "lockstep.db")
	for i, want := range []desk.Counts{
		{Refunds: 1, Refunded: 1, Lookups: 1, Approved: 1, Resumed: 1},
		{Refunds: 1},
	} {
		var out bytes.Buffer
		got, err := desk.Run(context.Background(), desk.Config{DB: db, Out: &out})
		if err != nil {
			t.Fatalf("run %d: %v\n%s", i+1, err, out.String())
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("run %d counts (-want +got):\n%s\n%s", i+1, diff, out.String())
		}
		for _, line := range map[int][]string{
			0: {"Triage routed the case to billing; the thread waits in billing > tools.", "billing: Refunded 40 EUR on A-7"},
			1: {"Already finished (status done)", "triage: billing: order A-7 was charged twice"},
		}[i] {
			if !strings.Contains(out.String(), line) {
				t.Errorf("run %d output lacks %q:\n%s", i+1, line, out.String())
			}
		}
	}
}
