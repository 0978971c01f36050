package graph

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// maxRunnerBytes caps a runner name (WithRunner).
const maxRunnerBytes = 256

// WithRunner names the runner this Runnable is. A runner is the identity
// under which a Runnable's runs hold thread leases (checkpoint.Lease.Runner):
// each run is its own lease owner (its run ID), and its lease also names
// the runner. A runner takes back a lease that one of its own runs still
// holds once that run has ended: a run whose release failed (a full
// disk, an I/O error) does not keep the same Runnable's next Resume or
// Continue of the thread out until its lease ends. A lease held by a run
// of another runner is waited out (its *checkpoint.BusyError says whose
// it is and until when), and so is a lease of a run of this Runnable that
// is still running, whichever of the two runs asked first.
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

// Running reports whether owner (a lease's owner, a run ID) is a run of
// this Runnable that has not ended. A lease of this Runnable's runner
// whose owner is not running was left by a run that ended without
// releasing it, or by another process under the same runner name, and may
// be taken back (checkpoint.Lease.TakeBack), as package workers' pools do
// when they start.
func (r *Runnable[S]) Running(owner string) bool { return r.live.has(owner) }

// LeaseTTL returns how long a run's claim on its thread lasts without
// renewal (see WithLeaseTTL).
func (r *Runnable[S]) LeaseTTL() time.Duration { return r.cfg.leaseTTL }

// Saver returns the saver the Runnable's runs write to (WithSaver), nil
// without one.
func (r *Runnable[S]) Saver() checkpoint.Saver { return r.cfg.saver }

// liveRuns is the set of a Runnable's runs that have not ended, by run
// ID (the lease owner). A run is in it from before its first request to a
// saver until after it released its lease (or failed to), and never again:
// run IDs are unique. So a lease of this runner whose owner is not in it
// is held by a run that has ended (or by a killed process of the same
// runner name), for good, and may be taken back; one whose owner is in it
// is a live run's and is waited out like another runner's.
type liveRuns struct {
	mu sync.Mutex
	n  map[string]int
}

// enter registers the run owner.
func (l *liveRuns) enter(owner string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == nil {
		l.n = map[string]int{}
	}
	l.n[owner]++
}

// has reports whether the run owner is registered.
func (l *liveRuns) has(owner string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n[owner] > 0
}

// leave ends a registration of enter.
func (l *liveRuns) leave(owner string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[owner]--; l.n[owner] <= 0 {
		delete(l.n, owner)
	}
}

// lease registers a new run of thread, owned by owner, and returns its
// lease and the function that ends the registration (call it once the run
// released its lease, or failed to, and will send no request any more).
func (r *Runnable[S]) lease(owner string) (checkpoint.Lease, func()) {
	r.live.enter(owner)
	return checkpoint.Lease{Owner: owner, Runner: r.cfg.runner, TTL: r.cfg.leaseTTL}, func() { r.live.leave(owner) }
}

// request sends a request of the run to the saver: do, with the run's
// lease. When the saver refuses the run's first acquisition of the thread
// because a run of this runner holds it (a *checkpoint.BusyError with
// SameRunner) and that run is not a live run of this Runnable, so it has
// ended for good without releasing its lease (a release that failed on a
// full disk, or a killed process of the same runner name), do runs once
// more taking back that one run's lease (checkpoint.Lease.TakeBack).
// Whether the holder has ended is decided only once the saver has named
// it, and the saver takes the lease over only while that same run still
// holds it: a live run of this Runnable is never taken over, even one
// that claimed the thread while this request was on its way, and two runs
// of one Runnable are kept apart by the lease exactly as two runners are.
//
// A subgraph's run sends its requests through the run of the task that
// runs it, with that run's lease.
//
// Only a run that never held the thread takes a lease back: one refused
// after it held the thread has lost it to a newer run (its lease lapsed),
// and whatever it read is stale even when that run has ended since. A run
// that has ended (its finish began) sends nothing: a goroutine it left
// behind cannot write under a lease another run of the runner may take
// back.
//
// Once the run holds the lease, every request is fenced
// (checkpoint.Lease.Held, D17): it commits only while the lease is still
// the run's, so a run that lost the thread (paused past its lease while
// another run took over, and maybe released it again) lands none of its
// writes, its heartbeat's included.
func (ru *run[S]) request(do func(checkpoint.Lease) error) error {
	if ru.ended.Load() {
		return ru.endedError()
	}
	if ru.nest != nil {
		return ru.nest.request(do)
	}
	live := ru.live // the runner's runs: the root's for a subgraph's state update
	if live == nil {
		live = &ru.r.live
	}
	l := ru.lease
	l.Held = ru.holds.Load()
	err := do(l)
	var be *checkpoint.BusyError
	switch {
	case err == nil:
		ru.acquired.Store(true)
		return nil
	case ru.acquired.Load() || !errors.As(err, &be) || !be.SameRunner || be.Owner == "" || be.Owner == l.Owner || live.has(be.Owner):
		return err
	}
	l.TakeBack = be.Owner
	if err := do(l); err != nil {
		return err
	}
	ru.acquired.Store(true)
	return nil
}

// endedError is the error of a request of a run that has ended (see
// request): it matches checkpoint.ErrThreadBusy, as the error of a run
// that lost the thread does.
func (ru *run[S]) endedError() error {
	return fmt.Errorf("graph: thread %q: run %s has ended and holds the thread no more (a goroutine it left behind asked to write); nothing was written: %w", ru.thread, ru.lease.Owner, checkpoint.ErrThreadBusy)
}
