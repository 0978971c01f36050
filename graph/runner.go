package graph

import (
	"fmt"
	"sync"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// maxRunnerBytes caps a runner name (WithRunner).
const maxRunnerBytes = 256

// WithRunner names the runner this Runnable is. A runner is the identity
// under which a Runnable's runs hold thread leases (checkpoint.Lease.Runner):
// each run is its own lease owner (its run ID), and its lease also names
// the runner. A runner takes back a lease that one of its own runs still
// holds once nothing of it runs on the thread any more: a run whose
// release failed (a full disk, an I/O error) does not keep the same
// Runnable's next Resume or Continue of the thread out until its lease
// ends. A lease held by a run of another runner is waited out (its
// *checkpoint.BusyError says whose it is and until when), and so is a
// lease of a run of this Runnable that is still running.
//
// The default is a random name per Runnable (from the OS, not from
// WithRandom's source): only the Runnable itself takes its leases back. Give a name that stays the same across restarts
// (a worker's name: "billing-worker-1") to let a process take back, at
// once, the leases a killed process of the same name left, instead of
// waiting WithLeaseTTL; then no two Runnables that run at the same time,
// in this process or another, may share the name, since each takes back
// whatever lease of the name it finds idle in itself. A name is 1 to 256
// bytes; anything else is a *CompileError.
func WithRunner(name string) Option {
	return func(c *config) {
		if name == "" || len(name) > maxRunnerBytes {
			c.errs = append(c.errs, &CompileError{Problem: fmt.Sprintf("runner name of %d bytes: want 1 to %d", len(name), maxRunnerBytes)})
		}
		c.runner = name
	}
}

// Runner returns the name of the runner this Runnable is (see WithRunner):
// the one its runs' leases name, and a *checkpoint.BusyError reports.
func (r *Runnable[S]) Runner() string { return r.cfg.runner }

// liveRuns counts a Runnable's runs per thread, so that a run knows
// whether it is the only one of its runner on the thread: then a lease
// that names the runner belongs to a run that has ended, and is taken back.
type liveRuns struct {
	mu sync.Mutex
	n  map[string]int
}

// enter registers a run on thread.
func (l *liveRuns) enter(thread string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == nil {
		l.n = map[string]int{}
	}
	l.n[thread]++
}

// alone reports whether one run at most is registered on thread.
func (l *liveRuns) alone(thread string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n[thread] <= 1
}

// leave ends a run registered with enter.
func (l *liveRuns) leave(thread string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[thread]--; l.n[thread] <= 0 {
		delete(l.n, thread)
	}
}

// lease registers a new run of thread, owned by owner, and returns its
// lease and the function that ends the registration (call it once the run
// released its lease, or failed to).
func (r *Runnable[S]) lease(thread, owner string) (checkpoint.Lease, func()) {
	r.live.enter(thread)
	return checkpoint.Lease{Owner: owner, Runner: r.cfg.runner, TTL: r.cfg.leaseTTL}, func() { r.live.leave(thread) }
}

// request returns the lease a write or claim of the run carries: the
// run's, taking back a lease of this runner when no other run of this
// Runnable is on the thread (so the holder is a run that has ended). It
// is decided at each request, so that a run that was paused past its
// lease never takes the thread back from a newer run of the same
// Runnable.
func (ru *run[S]) request() checkpoint.Lease {
	l := ru.lease
	l.TakeBack = ru.r.live.alone(ru.thread)
	return l
}
