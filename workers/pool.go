package workers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/safe"
	"github.com/lockstepgo/lockstep/retry"
)

// Store is what a pool needs of its saver: the saver its Runnable writes
// to, keeping due work and queued input. The memory, SQLite and Postgres
// savers implement it; a saver that does not makes New fail with ErrUnsupported.
type Store interface {
	checkpoint.Saver
	checkpoint.DueWork
	checkpoint.InputQueue
}

// Options configure a Pool. A zero field means its default; a negative
// one is refused by New (a *ConfigError), never replaced.
type Options struct {
	// Concurrency caps the threads the pool works on at once: claimed
	// threads, Submit's runs and approval resumes together (default 16).
	Concurrency int
	// Poll is how often an idle pool looks for due work (default 1s). It
	// also wakes when a lease it knows of ends, when a slot frees, and
	// when this process queues input, so Poll only bounds how late it
	// sees input another process queued.
	Poll time.Duration
	// Drain is how long Run lets the runs in flight finish once its
	// context ends, before it cancels them (default 0: at once). A
	// cancelled run stops at its next step boundary (a node gets the
	// cancellation through its context) and its thread is handed back:
	// another worker takes it over at once.
	Drain time.Duration
	// Retry spaces and bounds the attempts at a thread whose run fails
	// without finishing (a store error, a lost database, a failure to
	// apply queued input): after n failed attempts the next is due
	// Retry.Wait(n) later, on the saver's clock, and after
	// Retry.Attempts() the pool stops retrying (the thread then stays as
	// it is, pending, until someone continues it, and its queued input
	// waits behind it). nil means DefaultRetry().
	Retry *retry.Policy
	// Approvals, if set, makes the pool resume the threads of decided
	// approvals too (an approval.Worker on this store, whose resumes run
	// on the pool's slots), with the options in Approval (its
	// Concurrency defaults to the pool's, its Logger to the pool's).
	Approvals approval.Store
	Approval  approval.WorkerOptions
	// Store is the saver's due work and queue; the default is the
	// Runnable's saver, which must implement Store. Set it when the
	// Runnable's saver wraps the store (a test's acknowledging wrapper).
	Store Store
	// Logger receives claims and outcomes at Debug and failures at Warn
	// and Error (default: discarded).
	Logger *slog.Logger
	// IDs makes the owners of claims and the keys of queued input that
	// were given none; they must be unique across every process sharing
	// the database (default: 128 random bits from crypto/rand).
	IDs func() string
}

// Pool runs the due work of a graph's threads, claimed from the saver's
// database, with bounded concurrency (see the package documentation). A
// Pool is safe for concurrent use; Run runs once at a time.
type Pool[S any] struct {
	r      *graph.Runnable[S]
	store  Store
	o      Options
	ttl    time.Duration
	runner string
	aw     *approval.Worker

	slots  chan struct{}
	wake   chan struct{}
	active atomic.Bool
	// tookBack is set once the pool took back the leases an earlier
	// process of its runner name left (takeBack).
	tookBack atomic.Bool

	mu      sync.Mutex
	threads map[string]int // threads this pool works on now
	// claims are the lease owners of the pool's claims, from before the
	// claim is asked for until after it is settled: takeBack leaves
	// their leases alone even while no run of the Runnable is under
	// them (before the run starts, after it ends).
	claims  map[string]bool
	waiters map[int64][]chan struct{} // Wait's, by queued input ID
}

// New returns a pool that runs r's due threads. It returns a *ConfigError
// (ErrInvalidConfig) for a nil Runnable or a negative option, an error
// matching ErrUnsupported when r's saver (or Options.Store) does not keep
// due work, and approval.NewWorker's error for bad Approval options.
func New[S any](r *graph.Runnable[S], opts Options) (*Pool[S], error) {
	if r == nil {
		return nil, &ConfigError{Field: "Runnable", Reason: "nil: give the compiled graph whose threads the pool runs"}
	}
	o := opts
	switch {
	case o.Concurrency < 0:
		return nil, &ConfigError{Field: "Concurrency", Reason: fmt.Sprintf("%d: want 1 or more, or 0 for 16", o.Concurrency)}
	case o.Poll < 0:
		return nil, &ConfigError{Field: "Poll", Reason: fmt.Sprintf("%v: want a positive interval, or 0 for 1s", o.Poll)}
	case o.Drain < 0:
		return nil, &ConfigError{Field: "Drain", Reason: fmt.Sprintf("%v: want 0 (cancel at once) or more", o.Drain)}
	}
	if o.Retry == nil {
		rp := DefaultRetry()
		o.Retry = &rp
	} else {
		rp := *o.Retry // the pool's own copy
		if err := rp.Validate(); err != nil {
			return nil, &ConfigError{Field: "Retry", Reason: err.Error(), Err: err}
		}
		o.Retry = &rp
	}
	if o.Store == nil {
		st, ok := r.Saver().(Store)
		if !ok {
			return nil, fmt.Errorf("%w: %T keeps no due work or queued input (it implements neither checkpoint.DueWork nor checkpoint.InputQueue); use the memory, SQLite or Postgres saver", ErrUnsupported, r.Saver())
		}
		o.Store = st
	}
	if o.Concurrency == 0 {
		o.Concurrency = 16
	}
	if o.Poll == 0 {
		o.Poll = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.IDs == nil {
		o.IDs = randomID
	}
	p := &Pool[S]{
		r: r, store: o.Store, o: o, ttl: r.LeaseTTL(), runner: r.Runner(),
		slots: make(chan struct{}, o.Concurrency), wake: make(chan struct{}, 1),
		threads: map[string]int{}, waiters: map[int64][]chan struct{}{}, claims: map[string]bool{},
	}
	if o.Approvals != nil {
		wo := o.Approval
		if wo.Concurrency == 0 {
			wo.Concurrency = o.Concurrency
		}
		if wo.Logger == nil {
			wo.Logger = o.Logger
		}
		if wo.Name == "" && len(p.runner) <= approval.MaxClaimBytes {
			// The pool's name: a process run again under it takes back
			// the approval claims its killed predecessor left.
			wo.Name = p.runner
		}
		aw, err := approval.NewWorker(o.Approvals, p.resumeApproval, wo)
		if err != nil {
			return nil, err
		}
		p.aw = aw
	}
	return p, nil
}

// DefaultRetry is the retry policy of a pool whose Options.Retry is nil:
// 10 attempts, 1s doubling to a minute, no jitter.
func DefaultRetry() retry.Policy {
	return retry.Policy{MaxAttempts: 10, Initial: time.Second, Multiplier: 2, Max: time.Minute}
}

func randomID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("workers: crypto/rand failed: " + err.Error()) // it never does (see crypto/rand.Read)
	}
	return hex.EncodeToString(b[:])
}

// newID asks Options.IDs for an ID; one that panics or returns "" gets a
// random one.
func (p *Pool[S]) newID() (id string) {
	if p := safe.Call(func() { id = p.o.IDs() }); p != nil || id == "" {
		return randomID()
	}
	return id
}

// backoff is the retry policy's wait after attempts failed attempts. A
// policy with a Rand reads the application's reader, under ctx: one that
// panics, or is still reading when ctx ends, leaves the wait unspread
// (logged).
func (p *Pool[S]) backoff(ctx context.Context, attempts int) time.Duration {
	rp := *p.o.Retry
	if rp.Rand == nil {
		return rp.Wait(attempts)
	}
	d, pn, err := safe.Bound(ctx, nil, "the Rand of Options.Retry", func() time.Duration { return rp.Wait(attempts) })
	switch {
	case pn != nil:
		p.o.Logger.LogAttrs(ctx, slog.LevelWarn, "the Rand of Options.Retry panicked; the wait is not spread", slog.String("panic", pn.String()))
	case err != nil:
		p.o.Logger.LogAttrs(ctx, slog.LevelWarn, "the Rand of Options.Retry did not return; the wait is not spread", slog.String("error", err.Error()))
	default:
		return d
	}
	return rp.Delay(attempts, 0.5)
}

// acquire takes a slot, waiting for one until ctx ends.
func (p *Pool[S]) acquire(ctx context.Context) error {
	select {
	case p.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tryAcquire takes up to n free slots without waiting and returns how many.
func (p *Pool[S]) tryAcquire(n int) int {
	got := 0
	for got < n {
		select {
		case p.slots <- struct{}{}:
			got++
		default:
			return got
		}
	}
	return got
}

// release frees a slot and wakes the claim loop.
func (p *Pool[S]) release() {
	<-p.slots
	p.signal()
}

// signal wakes the claim loop.
func (p *Pool[S]) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// enter registers work on thread; leave ends it.
func (p *Pool[S]) enter(thread string) {
	p.mu.Lock()
	p.threads[thread]++
	p.mu.Unlock()
}

func (p *Pool[S]) leave(thread string) {
	p.mu.Lock()
	if p.threads[thread]--; p.threads[thread] <= 0 {
		delete(p.threads, thread)
	}
	p.mu.Unlock()
}

// own records owners as the pool's claims; disown ends that.
func (p *Pool[S]) own(owners ...string) {
	p.mu.Lock()
	for _, o := range owners {
		p.claims[o] = true
	}
	p.mu.Unlock()
}

func (p *Pool[S]) disown(owners ...string) {
	p.mu.Lock()
	for _, o := range owners {
		delete(p.claims, o)
	}
	p.mu.Unlock()
}

// ownClaim reports whether owner is one of the pool's claims.
func (p *Pool[S]) ownClaim(owner string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.claims[owner]
}

func (p *Pool[S]) busyHere(thread string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.threads[thread] > 0
}

// Report says what RunOnce did.
type Report struct {
	// Claimed counts the threads claimed.
	Claimed int
	// Continued counts runs that went on with a thread a run had left
	// unfinished (a dead worker's, a handed-back one).
	Continued int
	// Applied counts queued inputs applied (their run may wait or fail).
	Applied int
	// Parked counts threads whose queued input waits behind an
	// interrupt.
	Parked int
	// Deferred counts failed attempts that will be retried.
	Deferred int
	// HandedBack counts claims given back unfinished (the pool stopped,
	// or another runner held the thread).
	HandedBack int
	// Resumed counts approvals resumed (see approval.WorkerReport).
	Resumed int
	// TakenBack counts the threads the pool took back when it started:
	// their live leases named its runner but no run of this process (an
	// earlier process of the same name left them; see Pool.Run). Each is
	// also counted as a claim, by what its run did.
	TakenBack int
}

func (r *Report) add(o outcome) {
	r.Claimed++
	switch o {
	case outContinued:
		r.Continued++
	case outApplied:
		r.Applied++
	case outParked:
		r.Parked++
	case outDeferred:
		r.Deferred++
	case outHandedBack:
		r.HandedBack++
	}
}

// RunOnce claims the threads due now (as many at a time as the pool has
// free slots; on the pool's first call, first the threads an earlier
// process of its name left leased, see Run), runs them, and returns once every one is settled; a thread
// that is due again at once (more input queued) is claimed again in the
// same call. With Options.Approvals it then resumes the decided approvals
// (approval.Worker.RunOnce). It returns the first error of the store or
// of ctx; a run's own failure is recorded on its thread, not returned.
func (p *Pool[S]) RunOnce(ctx context.Context) (Report, error) {
	var (
		rep Report
		mu  sync.Mutex
	)
	add := func(o outcome) {
		mu.Lock()
		rep.add(o)
		mu.Unlock()
	}
	if !p.tookBack.Load() {
		var wg sync.WaitGroup
		n, err := p.takeBack(ctx, ctx, &wg, add)
		wg.Wait()
		rep.TakenBack += n
		if err != nil {
			return rep, err
		}
	}
	for {
		var wg sync.WaitGroup
		n, err := p.claim(ctx, &wg, add)
		wg.Wait()
		if err != nil {
			return rep, err
		}
		if n == 0 {
			break
		}
	}
	if p.aw != nil {
		ar, err := p.aw.RunOnce(ctx)
		rep.Resumed += ar.Resumed
		if err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// claim takes the free slots, claims that many due threads and starts
// working on each (wg counts them; done is told each outcome). It returns
// how many it claimed and the saver's wait until the next due thread.
func (p *Pool[S]) claim(ctx context.Context, wg *sync.WaitGroup, done func(outcome)) (int, error) {
	n, _, err := p.claimNext(ctx, ctx, wg, done)
	return n, err
}

func (p *Pool[S]) claimNext(ctx, runCtx context.Context, wg *sync.WaitGroup, done func(outcome)) (int, time.Duration, error) {
	free := p.tryAcquire(cap(p.slots))
	if free == 0 {
		return 0, 0, nil
	}
	q := checkpoint.DueQuery{Runner: p.runner, TTL: p.ttl, Owners: make([]string, free)}
	for i := range q.Owners {
		q.Owners[i] = p.newID()
	}
	p.own(q.Owners...)
	b, err := p.store.ClaimDue(ctx, q)
	for range free - len(b.Threads) {
		<-p.slots
	}
	claimed := map[string]bool{}
	for _, d := range b.Threads {
		claimed[d.Owner] = true
	}
	for _, o := range q.Owners {
		if !claimed[o] {
			p.disown(o)
		}
	}
	if err != nil {
		return 0, 0, err
	}
	for _, d := range b.Threads {
		wg.Go(func() {
			defer p.release()
			defer p.disown(d.Owner)
			o := p.process(runCtx, d)
			if done != nil {
				done(o)
			}
		})
	}
	return len(b.Threads), b.Next, nil
}

// takeBack claims at once, with TakeBack, every thread whose live lease
// names the pool's runner and whose owner is no run of the Runnable in
// this process, and works on each as on a claimed thread (wg counts them;
// done is told each outcome), taking a slot for each as one frees. It
// runs once per pool (its first Run or RunOnce that gets that far): the
// leases it finds were left by an earlier process of the runner name,
// killed, or alive but paused or cut off, which the new claim's epoch
// fences. A lease that passed to another owner since it was read is left
// to it. It returns how many threads it took back.
func (p *Pool[S]) takeBack(ctx, runCtx context.Context, wg *sync.WaitGroup, done func(outcome)) (int, error) {
	rl, ok := p.store.(checkpoint.RunnerLeases)
	if !ok {
		p.tookBack.Store(true)
		return 0, nil
	}
	leases, err := rl.LeasedBy(ctx, p.runner, 0)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, l := range leases {
		if p.r.Running(l.Owner) || p.ownClaim(l.Owner) {
			continue // a run or a claim of this process, not an earlier one's
		}
		if err := p.acquire(ctx); err != nil {
			return n, err
		}
		owner := p.newID()
		p.own(owner)
		d, err := p.store.Hold(ctx, l.Thread, checkpoint.Lease{Owner: owner, Runner: p.runner, TTL: p.ttl, TakeBack: l.Owner})
		if err != nil {
			p.disown(owner)
			p.release()
			if errors.Is(err, checkpoint.ErrThreadBusy) {
				continue // the lease passed to another owner since: theirs
			}
			return n, err
		}
		n++
		p.o.Logger.LogAttrs(ctx, slog.LevelInfo, "took back a thread an earlier process of the pool's name left leased",
			slog.String("thread", l.Thread), slog.String("runner", p.runner), slog.String("owner", l.Owner), slog.Uint64("epoch", d.Epoch))
		wg.Go(func() {
			defer p.release()
			defer p.disown(owner)
			o := p.process(runCtx, d)
			if done != nil {
				done(o)
			}
		})
	}
	p.tookBack.Store(true)
	return n, nil
}

// Run works on due threads until ctx ends, then stops claiming, lets the
// runs in flight finish for up to Options.Drain, cancels the rest (their
// threads are handed back, due at once for another worker) and returns
// ctx's error once every run has returned. It first takes back the
// threads an earlier process of the pool's name left leased (see the
// package doc, Names and take-back; a failure is logged and retried at the
// next poll). With Options.Approvals it also
// resumes decided approvals (approval.Worker.Run; those in flight are
// handed back at once). A failing store is logged and retried at the next
// poll. It returns ErrRunning, doing nothing, while another Run of the
// pool runs.
//
// Run waits for the runs it cancelled: a node that ignores its context's
// cancellation keeps Run from returning until it does (see package
// graph, Application code).
func (p *Pool[S]) Run(ctx context.Context) error {
	if !p.active.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer p.active.Store(false)
	runCtx, cancelRuns := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRuns()
	var wg sync.WaitGroup
	if p.aw != nil {
		wg.Go(func() {
			if err := p.aw.Run(ctx, p.o.Poll); err != nil && ctx.Err() == nil {
				p.o.Logger.Error("the approval worker stopped", slog.String("error", err.Error()))
			}
		})
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for ctx.Err() == nil {
		wait := p.o.Poll
		if !p.tookBack.Load() {
			if _, err := p.takeBack(ctx, runCtx, &wg, nil); err != nil && ctx.Err() == nil {
				p.o.Logger.Warn("taking back the leases of the pool's name failed; trying again at the next poll", slog.String("error", err.Error()), slog.Duration("poll", p.o.Poll))
			}
		}
		n, next, err := p.claimNext(ctx, runCtx, &wg, nil)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				p.o.Logger.Warn("claiming due threads failed; trying again at the next poll", slog.String("error", err.Error()), slog.Duration("poll", p.o.Poll))
			}
		case n > 0:
			wait = 0 // more may be due: claim again while slots are free
		case next > 0 && next < wait:
			wait = next + time.Millisecond
		}
		if wait == 0 {
			if len(p.slots) < cap(p.slots) {
				continue
			}
			wait = p.o.Poll // every slot is taken: a release wakes the loop
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
		case <-p.wake:
		case <-timer.C:
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
	finished := make(chan struct{})
	go func() {
		wg.Wait()
		close(finished)
	}()
	if p.o.Drain > 0 {
		drain := time.NewTimer(p.o.Drain)
		select {
		case <-finished:
		case <-drain.C:
		}
		drain.Stop()
	}
	cancelRuns()
	<-finished
	return ctx.Err()
}
