package systemtest

import (
	"context"
	"time"

	"github.com/lockstepgo/lockstep/nodes"
)

// GenerationSkew is how far each generation of a crash test's children
// runs its clock ahead of the previous one: more than every lease (the
// graph's 30s, the ledger's intent lease, the worker's claim of a minute),
// so that a restarted process never waits for a dead one's lease.
// Compressed time, as in deterministic simulation: leases are for
// liveness, and the checks are about safety.
const GenerationSkew = 10 * time.Minute

// Clock is a nodes.Clock that reads the time from a function (a
// generation's skewed clock) and sleeps for real.
type Clock struct{ NowFunc func() time.Time }

// Now returns NowFunc's time.
func (c Clock) Now() time.Time { return c.NowFunc() }

// Sleep waits for d, or returns ctx's error when it ends first.
func (c Clock) Sleep(ctx context.Context, d time.Duration) error {
	return nodes.SystemClock().Sleep(ctx, d)
}
