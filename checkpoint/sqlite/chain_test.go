package sqlite

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/internal/faultdb"
)

// TestPutChainAllOrNothing: a fault at any statement of a chain's
// transaction, the last checkpoint's included, leaves none of the chain
// saved (on a new thread and on an existing one); a fault after a
// successful COMMIT is reported as indeterminate and leaves all of it.
func TestPutChainAllOrNothing(t *testing.T) {
	drv := faults(t)
	tests := []struct {
		name  string
		fault faultdb.Fault
	}{
		{"first insert", faultdb.Fault{Op: faultdb.OpExec, Match: "INSERT INTO checkpoints", N: 1}},
		{"threads row", faultdb.Fault{Op: faultdb.OpExec, Match: "INSERT INTO threads", N: 1}},
		{"second insert", faultdb.Fault{Op: faultdb.OpExec, Match: "INSERT INTO checkpoints", N: 2}},
		{"third insert", faultdb.Fault{Op: faultdb.OpExec, Match: "INSERT INTO checkpoints", N: 3}},
		{"release", faultdb.Fault{Op: faultdb.OpExec, Match: "UPDATE threads SET lease_owner = NULL", N: 1}},
		{"commit", faultdb.Fault{Op: faultdb.OpCommit, Match: "COMMIT"}},
		{"after commit", faultdb.Fault{Op: faultdb.OpCommit, Match: "COMMIT", When: faultdb.After}},
	}
	for _, existing := range []bool{false, true} {
		for _, tc := range tests {
			if existing && tc.name == "threads row" {
				continue // an existing thread has its row
			}
			t.Run(fmt.Sprintf("existing=%v/%s", existing, tc.name), func(t *testing.T) {
				drv.Reset()
				s := openTemp(t, Config{Synchronous: SyncNormal, DriverName: faultDriverName})
				l := newLine("t")
				if existing {
					l = putLine(t, s, "t", 2)
				}
				before := listIDs(t, s, "t")
				reqs := l.chain(3)
				fault := tc.fault
				fault.Err = sqliteErr(10) // SQLITE_IOERR
				drv.Arm(fault)
				err := s.PutChain(t.Context(), reqs)
				var se *StoreError
				if !errors.As(err, &se) {
					t.Fatalf("PutChain: %v, want a *StoreError", err)
				}
				drv.Reset()
				want := before
				if fault.When == faultdb.After {
					if !errors.Is(err, ErrCommitIndeterminate) {
						t.Errorf("PutChain: %v, want ErrCommitIndeterminate", err)
					}
					for i := len(reqs) - 1; i >= 0; i-- {
						want = append([]string{reqs[i].Checkpoint.ID}, want...)
					}
					want = slices.Clone(want)
					slices.Sort(want)
					slices.Reverse(want)
				}
				if diff := cmp.Diff(want, listIDs(t, s, "t")); diff != "" {
					t.Errorf("checkpoints after the fault (-want +got):\n%s", diff)
				}
				integrityOK(t, s.DB())
			})
		}
	}
}
