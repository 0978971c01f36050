package checkpoint_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// TestBusyErrorSaysWhatToDo: a lease error names the thread, the run and
// runner holding it, the epoch and the lease's end, and says what to do:
// retry after the end (rounded up to the second); for another runner's
// lease, that it ends on its own if that runner was killed; for a run of
// the requester's own runner, that it is still running; for a run that
// lost the thread, to run the thread again.
func TestBusyErrorSaysWhatToDo(t *testing.T) {
	until := time.Date(2026, 5, 4, 21, 24, 59, 250_000_000, time.UTC)
	for _, tc := range []struct {
		name string
		err  checkpoint.BusyError
		want []string
		not  []string
	}{
		{"another runner", checkpoint.BusyError{Thread: "order-7", Owner: "run-a", Runner: "worker-2", Epoch: 4, Until: until},
			[]string{`thread "order-7"`, "run run-a of runner worker-2", "lease epoch 4", "until 2026-05-04T21:24:59.25Z", "retry after 2026-05-04T21:25:00Z",
				"another runner's lease; if that runner was killed, the lease ends on its own then"},
			[]string{"still running"}},
		{"same runner", checkpoint.BusyError{Thread: "order-7", Owner: "run-a", Runner: "worker-2", Epoch: 4, Until: until, SameRunner: true},
			[]string{"run run-a of runner worker-2", "retry after 2026-05-04T21:25:00Z", "belongs to this runner and is still running"},
			[]string{"killed"}},
		{"no runner, whole second", checkpoint.BusyError{Thread: "t", Owner: "run-a", Epoch: 1, Until: until.Truncate(time.Second)},
			[]string{"leased to run run-a (lease epoch 1)", "retry after 2026-05-04T21:24:59Z"},
			[]string{"of runner"}},
		{"lost the thread", checkpoint.BusyError{Thread: "t"},
			[]string{`thread "t"`, "this run lost the thread", "run the thread again (Continue)"},
			[]string{"retry after"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := tc.err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q lacks %q", msg, w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(msg, n) {
					t.Errorf("message %q has %q", msg, n)
				}
			}
		})
	}
}

// TestTakesBack: only a TakeBack, not Held, that names the holder and
// the same non-empty runner takes a lease back.
func TestTakesBack(t *testing.T) {
	for _, tc := range []struct {
		l             checkpoint.Lease
		owner, runner string
		want          bool
	}{
		{checkpoint.Lease{Owner: "b", Runner: "r", TakeBack: "a"}, "a", "r", true},
		{checkpoint.Lease{Owner: "b", Runner: "r"}, "a", "r", false},
		{checkpoint.Lease{Owner: "b", Runner: "r", TakeBack: "c"}, "a", "r", false},
		{checkpoint.Lease{Owner: "b", Runner: "r", TakeBack: "a", Held: true}, "a", "r", false},
		{checkpoint.Lease{Owner: "b", Runner: "r", TakeBack: "a"}, "a", "q", false},
		{checkpoint.Lease{Owner: "b", TakeBack: "a"}, "a", "", false},
	} {
		if got := tc.l.TakesBack(tc.owner, tc.runner); got != tc.want {
			t.Errorf("%+v.TakesBack(%q, %q) = %v, want %v", tc.l, tc.owner, tc.runner, got, tc.want)
		}
	}
}
