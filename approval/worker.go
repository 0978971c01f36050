package approval

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

	"golang.org/x/sync/errgroup"

	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/hookcall"
	"github.com/lockstepgo/lockstep/internal/safe"
	"github.com/lockstepgo/lockstep/observe"
	"github.com/lockstepgo/lockstep/retry"
)

// ResumeFunc resumes the thread of a decided approval with its decision.
// ResumeGraph builds one for a compiled graph. It returns nil once the
// thread has run on with the decision; an error matching
// graph.ErrAlreadyAnswered, graph.ErrNothingToResume,
// graph.ErrUnknownInterrupt or graph.ErrThreadNotFound when the thread no
// longer waits on the approval; an error matching checkpoint.ErrThreadBusy
// or checkpoint.ErrConflict when another runner holds the thread; any
// other error for a failure worth another attempt.
type ResumeFunc func(ctx context.Context, rec Record) error

// ResumeGraph returns a ResumeFunc that resumes rec's thread on r with
// Command{ResumeByID: {rec.ID: rec.Decision}} and the given run options.
//
// When an earlier attempt delivered this decision but its run stopped
// before the thread finished (the process died mid-node or after a saved
// step, or a later node failed), Resume fails with
// graph.ErrAlreadyAnswered, graph.ErrUnknownInterrupt or
// graph.ErrNothingToResume while the thread is pending or failed and its
// history holds the answer; the function then continues the thread, so
// the run completes (a failure is retried with the worker's backoff).
// Nodes that must not repeat work on that path wrap it in graph.Durable,
// as the tool node does.
//
// Called by a Worker whose store is a Consumer (SQLStore, package
// postgres's store), on a graph whose saver is a checkpoint.Joiner (the
// SQLite and Postgres savers), the resume consumes the approval in the
// transaction of the save that carries its decision into the thread, as
// ResumeGraphConsuming does (D16), so that the consumption is fenced by
// the run's lease (D17): a worker that lost the thread (paused past its
// lease while another took it over) commits neither its checkpoint nor
// the consumption, and gets an error matching checkpoint.ErrThreadBusy.
// A store opened on another database than the saver fails every resume
// with an error matching checkpoint.ErrNotJoinable, and the worker stops
// (see Worker.Run): open the store on the saver's database, or set
// WorkerOptions.NoConsume. On a saver that is no checkpoint.Joiner
// (MemorySaver), or with a store that is no Consumer (MemoryStore),
// nothing could share the save's transaction: the resume is the plain
// one, whose first-wins answer keeps the decision from being delivered
// twice.
func ResumeGraph[S any](r *graph.Runnable[S], opts ...graph.RunOption) ResumeFunc {
	return func(ctx context.Context, rec Record) error {
		if j, ok := ConsumptionFrom(ctx); ok {
			if _, joins := r.Saver().(checkpoint.Joiner); joins {
				withJoin := append(append([]graph.RunOption(nil), opts...), graph.WithAnswerJoin(j))
				return resumeGraph(ctx, r, rec, withJoin, opts)
			}
		}
		return resumeGraph(ctx, r, rec, opts, opts)
	}
}

// resumeGraph resumes rec's thread on r with resumeOpts, or continues it
// with continueOpts when an earlier attempt delivered the decision (see
// ResumeGraph).
func resumeGraph[S any](ctx context.Context, r *graph.Runnable[S], rec Record, resumeOpts, continueOpts []graph.RunOption) error {
	_, err := r.Resume(ctx, rec.Thread, graph.Command[S]{ResumeByID: map[string]any{rec.ID: rec.Decision}}, resumeOpts...)
	answered := errors.Is(err, graph.ErrAlreadyAnswered)
	if !answered && !errors.Is(err, graph.ErrUnknownInterrupt) && !errors.Is(err, graph.ErrNothingToResume) {
		return err
	}
	// An earlier attempt may have delivered the decision and stopped
	// before the run finished: a crash, or a failure after the
	// approval's step was saved. The thread is then pending or failed,
	// its history holds the answer, and its run goes on.
	snap, serr := r.GetState(ctx, rec.Thread)
	if serr != nil || snap.Status != graph.StatusPending && snap.Status != graph.StatusFailed {
		return err
	}
	if !answered {
		if ok, herr := delivered(ctx, r, rec); herr != nil || !ok {
			return err
		}
	}
	_, err = r.Continue(ctx, rec.Thread, continueOpts...)
	return err
}

// delivered reports whether the thread's history shows rec's decision as
// the answer a task was given.
func delivered[S any](ctx context.Context, r *graph.Runnable[S], rec Record) (bool, error) {
	h, err := r.History(ctx, rec.Thread, graph.HistoryOptions{})
	if err != nil {
		return false, err
	}
	for _, s := range h {
		for _, t := range s.Tasks {
			if _, ok := t.Answered[rec.ID]; ok {
				return true, nil
			}
		}
	}
	return false, nil
}

// WorkerOptions configure a Worker. A zero field means its default; a
// negative one (or a Retry policy that means nothing) is refused by
// NewWorker (ErrInvalidConfig), never replaced.
//
// The worker has no clock: the times it stores (a claim's end, when to
// retry) are the store's now plus Lease or Retry's wait, stamped by the
// store with the same clock that later compares them (Store.Now).
type WorkerOptions struct {
	// Batch is how many decisions one store query fetches (default 100).
	Batch int
	// Concurrency caps the resumes in flight (default 4), over different
	// threads: the decisions of one thread are resumed one at a time.
	Concurrency int
	// Lease is how long a claimed approval is left to this worker before
	// another may take it over, should this one die (default 1 minute),
	// on the store's clock. Keep it above the time a resumed run takes.
	// A worker that is stopped (its context ends) hands its claim back.
	Lease time.Duration
	// Retry spaces the resumes of an approval whose resume failed: after
	// n failed attempts the next is due Retry.Wait(n) later, on the
	// store's clock, and a busy thread is retried after Retry.Wait(1).
	// nil means DefaultWorkerRetry() (1s doubling to 5 minutes, no
	// jitter); a policy given means what package retry says (its zero
	// value: no wait). A decision is retried until its thread resumes, so
	// MaxAttempts must be 0: any other value is refused. Reading its Rand
	// is the application's code: a panic there, or a read still running
	// when the worker's context ends, is logged and the wait taken
	// unspread.
	Retry *retry.Policy
	// Sweeper, if set, is swept before every pass of Run (an *Inbox).
	Sweeper interface {
		Sweep(ctx context.Context) (SweepReport, error)
	}
	// Logger receives resume events at Debug and failures at Warn
	// (default: discarded).
	Logger *slog.Logger
	// Threads, if set, limits the worker to the approvals of threads for
	// which it returns true. Applications that share a database give each
	// worker the threads its graph owns, so that no thread is resumed with
	// another application's graph.
	Threads func(thread string) bool
	// Observer, if set, is told of every resume the worker makes, as an
	// observe.KindApprovalResume operation linked to the request's
	// TraceParent; the ResumeFunc runs with its context, which also
	// carries the link (observe.WithLinks), so that the run it starts
	// (ResumeGraph's) links to the request in whichever process raised
	// it. A panic in it loses the event (logged); a call still running
	// when the worker's context ends is given up on, and it is not called
	// again.
	Observer observe.Hook
	// Name is the worker's identity, which its claims record when the
	// store is a ResumeClaimer (Resume.Claimant): 1 to MaxClaimBytes
	// bytes of UTF-8. The default is a random name per Worker: only the
	// Worker itself takes its claims back (one whose attempt ended
	// without handing it back). Give a name that stays the same across
	// restarts ("billing-worker-1") to let the process run again take
	// back at once, rather than after Lease, the claims a killed process
	// of the same name left; then no two Workers that run at the same
	// time, in this process or another, may share the name, since each
	// takes back whatever claim of the name none of its own attempts
	// holds.
	Name string
	// NoConsume stops the worker from consuming approvals in the saver's
	// transaction. By default a worker whose store is a Consumer hands
	// its ResumeFunc the store's Consumption (ConsumptionFrom), which
	// ResumeGraph joins to the save that carries the decision into the
	// thread: the approval is consumed exactly when the thread holds its
	// answer, and never by a run that lost the thread. That needs the
	// store on the saver's database; set NoConsume only when it is not
	// (approvals in a database of their own), where every resume would
	// otherwise fail with an error matching checkpoint.ErrNotJoinable.
	// The thread's first-wins resume still delivers a decision once;
	// Trail.Consumed is then never set.
	NoConsume bool
}

// Worker resumes the threads of decided approvals, so that the process
// that records a decision (a CLI, a web page) need not hold the graph. It
// finds decisions whose thread was not resumed yet, claims each (so that
// workers in several processes do not all try the same one), calls the
// ResumeFunc and marks the approval resumed once the call returned
// without error, or with an error showing the thread no longer waits on
// it. Anything else is retried with backoff; a crash between recording a
// decision and resuming its thread leaves the decision unresumed, so the
// next worker to run resumes it, and the runtime's first-wins resume makes
// sure it happens once. The ResumeFunc, Threads and the retry policy's
// Rand are the application's code and run on the worker's goroutines: a
// ResumeFunc that panics (or returns an error whose Error method panics)
// is a failed attempt, a *ResumePanicError recorded on the approval and
// retried after the backoff; a Threads that panics owns nothing, a Rand
// that panics leaves the wait unspread; none stops the worker or the
// process. A
// Worker is safe for concurrent use.
type Worker struct {
	store  Store
	resume ResumeFunc
	o      WorkerOptions
	obs    *hookcall.Caller // o.Observer's; nil without one
	// claimer is store as a ResumeClaimer, nil when it is not one.
	claimer ResumeClaimer
	// consumer is store as a Consumer, nil when it is not one or
	// WorkerOptions.NoConsume is set.
	consumer Consumer
	// prefix and seq make the IDs of the worker's claims, unique to it.
	prefix string
	seq    atomic.Uint64
	// live holds the IDs of the claims the worker's attempts hold: a claim
	// of its name that is not in it has ended, for good (IDs are not
	// reused).
	liveMu sync.Mutex
	live   map[string]bool
}

// NewWorker returns a worker that resumes the decisions of store with
// resume. It returns an *Error matching ErrInvalidConfig when store or
// resume is nil, a field of opts is negative, opts.Name is set but not 1
// to MaxClaimBytes bytes of UTF-8, or opts.Retry is invalid (its Err then
// wraps the *retry.PolicyError) or sets MaxAttempts.
func NewWorker(store Store, resume ResumeFunc, opts WorkerOptions) (*Worker, error) {
	o := opts
	switch {
	case store == nil || resume == nil:
		return nil, newError("", ErrInvalidConfig, "a worker needs a store and a resume function")
	case o.Batch < 0:
		return nil, newError("", ErrInvalidConfig, "WorkerOptions.Batch is %d (0 means 100)", o.Batch)
	case o.Concurrency < 0:
		return nil, newError("", ErrInvalidConfig, "WorkerOptions.Concurrency is %d (0 means 4)", o.Concurrency)
	case o.Lease < 0:
		return nil, newError("", ErrInvalidConfig, "WorkerOptions.Lease is %v (0 means a minute)", o.Lease)
	case o.Retry != nil && o.Retry.MaxAttempts != 0:
		return nil, newError("", ErrInvalidConfig, "WorkerOptions.Retry.MaxAttempts is %d: a decision is retried until its thread resumes, leave it 0", o.Retry.MaxAttempts)
	case o.Name != "" && checkWorkerName("", o.Name) != nil:
		return nil, newError("", ErrInvalidConfig, "WorkerOptions.Name is %d bytes: want 1 to %d bytes of UTF-8 (or none: a random name)", len(o.Name), MaxClaimBytes)
	}
	prefix := randomName()
	if o.Name == "" {
		o.Name = "worker-" + prefix
	}
	if o.Retry == nil {
		p := DefaultWorkerRetry()
		o.Retry = &p
	} else {
		p := *o.Retry // the worker's own copy
		if err := p.Validate(); err != nil {
			e := newError("", ErrInvalidConfig, "WorkerOptions.Retry: %v", err)
			e.Err = err
			return nil, e
		}
		o.Retry = &p
	}
	if o.Batch == 0 {
		o.Batch = 100
	}
	if o.Concurrency == 0 {
		o.Concurrency = 4
	}
	if o.Lease == 0 {
		o.Lease = time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	w := &Worker{store: store, resume: resume, o: o, obs: hookcall.New(o.Observer, nil, o.Logger), prefix: prefix, live: map[string]bool{}}
	w.claimer, _ = store.(ResumeClaimer)
	if !o.NoConsume {
		w.consumer, _ = store.(Consumer)
	}
	return w, nil
}

// randomName returns 16 random hex digits from the OS.
func randomName() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// Name returns the worker's name (WorkerOptions.Name, or the random one it
// was given): the one its claims record.
func (w *Worker) Name() string { return w.o.Name }

// enter returns a new claim ID, registered as held by one of the
// worker's attempts until leave.
func (w *Worker) enter() string {
	id := fmt.Sprintf("%s-%d", w.prefix, w.seq.Add(1))
	w.liveMu.Lock()
	w.live[id] = true
	w.liveMu.Unlock()
	return id
}

// leave ends the registration of claim id (see enter).
func (w *Worker) leave(id string) {
	w.liveMu.Lock()
	delete(w.live, id)
	w.liveMu.Unlock()
}

// holds reports whether one of the worker's attempts holds claim id.
func (w *Worker) holds(id string) bool {
	w.liveMu.Lock()
	defer w.liveMu.Unlock()
	return w.live[id]
}

// DefaultWorkerRetry is the retry policy of a worker whose
// WorkerOptions.Retry is nil: 1s doubling to 5 minutes, no jitter.
func DefaultWorkerRetry() retry.Policy {
	return retry.Policy{Initial: time.Second, Multiplier: 2, Max: 5 * time.Minute}
}

// WorkerReport says what a pass did.
type WorkerReport struct {
	// Resumed counts threads resumed with their decision.
	Resumed int
	// Stale counts approvals whose thread no longer waited on them
	// (answered before, moved on, or deleted); they are marked resumed.
	Stale int
	// Deferred counts failed attempts that will be retried.
	Deferred int
	// Skipped counts approvals another worker had claimed.
	Skipped int
	// TakenBack counts claims of the worker's name that had ended without
	// finishing (a killed process of the name left them) and that it took
	// back before their lease ran out; each is also counted by what its
	// resume then did.
	TakenBack int
}

// RunOnce resumes every decision that is due now, each at most once per
// call, and returns what it did. A resume that fails with an error
// matching checkpoint.ErrNotJoinable (the store is not on the saver's
// database, see WorkerOptions.NoConsume) is recorded as a failed attempt
// and stops the pass with that error. Over a ResumeClaimer it first takes back
// the claims of its name that none of its attempts holds (a killed
// process of the name left them). It stops at the first error of the
// store or of ctx (resumes in flight finish first); a resume's own
// failure is recorded on the approval and retried later, not returned.
func (w *Worker) RunOnce(ctx context.Context) (WorkerReport, error) {
	var (
		rep     WorkerReport
		mu      sync.Mutex
		stopped atomic.Bool
		seen    = map[string]bool{}
	)
	batch := w.o.Batch
	if w.o.Threads != nil {
		batch = 0 // others' approvals could fill every batch: read them all
	}
	var back []Record
	if w.claimer != nil {
		var err error
		if back, err = w.claimer.Claims(ctx, w.o.Name, 0); err != nil {
			return rep, err
		}
	}
	for {
		recs, err := w.store.Unresumed(ctx, batch)
		if err != nil {
			return rep, err
		}
		// Claims to take back go first, in the first batch: each is
		// named by the claim read, and taken only if that claim still
		// holds the approval.
		recs = append(back, recs...)
		back = nil
		// The decisions of one thread are resumed one after the other, in
		// the store's order (oldest decision first), and threads in
		// parallel: two resumes of one thread at once would find it
		// leased to each other, and one would fail, busy, and wait for its
		// backoff while nothing held the thread any more.
		type job struct {
			rec      Record
			takeBack string
		}
		var (
			threads  []string
			byThread = map[string][]job{}
		)
		for _, rec := range recs {
			if seen[rec.ID] {
				continue
			}
			takeBack := ""
			if rec.Resume.Claim != "" && rec.Resume.Claimant == w.o.Name {
				if w.holds(rec.Resume.Claim) {
					continue // one of this worker's attempts (another RunOnce) holds it
				}
				takeBack = rec.Resume.Claim
			}
			seen[rec.ID] = true
			if w.o.Threads != nil && !w.owns(ctx, rec) {
				continue
			}
			if byThread[rec.Thread] == nil {
				threads = append(threads, rec.Thread)
			}
			byThread[rec.Thread] = append(byThread[rec.Thread], job{rec, takeBack})
		}
		var g errgroup.Group
		g.SetLimit(w.o.Concurrency)
		for _, thread := range threads {
			g.Go(func() error {
				for _, j := range byThread[thread] {
					if stopped.Load() {
						return nil
					}
					// The worker's goroutine: nothing may panic out of it
					// (the ResumeFunc's own panics are contained in handle).
					var (
						r   WorkerReport
						err error
					)
					if p := safe.Call(func() { r, err = w.handle(ctx, j.rec, j.takeBack) }); p != nil {
						err = &ResumePanicError{ID: j.rec.ID, In: "the worker", Value: p.Value, Stack: p.Stack}
					}
					mu.Lock()
					rep.add(r)
					mu.Unlock()
					if err != nil {
						stopped.Store(true)
						return err
					}
				}
				return nil
			})
		}
		fresh := len(threads)
		if err := g.Wait(); err != nil || fresh == 0 {
			return rep, err
		}
	}
}

func (r *WorkerReport) add(o WorkerReport) {
	r.Resumed += o.Resumed
	r.Stale += o.Stale
	r.Deferred += o.Deferred
	r.Skipped += o.Skipped
	r.TakenBack += o.TakenBack
}

// claim claims rec for one attempt of the worker, taking back the ended
// claim takeBack of its name when not "", and returns the claim's ID
// (registered as live: leave it once the attempt wrote its end) and
// whether the claim was taken.
func (w *Worker) claim(ctx context.Context, rec Record, takeBack string) (string, bool, error) {
	if w.claimer == nil {
		ok, err := w.store.ClaimResume(ctx, rec.ID, w.o.Lease)
		return "", ok, err
	}
	id := w.enter()
	ok, err := w.claimer.ClaimResumeAs(ctx, rec.ID, Claim{Worker: w.o.Name, ID: id, Lease: w.o.Lease, TakeBack: takeBack})
	if err != nil || !ok {
		w.leave(id)
		return "", ok, err
	}
	return id, true, nil
}

// handle claims and resumes one decision, observed; takeBack is an ended
// claim of the worker's name that holds it ("" for none).
func (w *Worker) handle(ctx context.Context, rec Record, takeBack string) (WorkerReport, error) {
	if w.obs == nil {
		return w.resumeOne(ctx, rec, takeBack)
	}
	e := requestEvent(observe.KindApprovalResume, rec.ID, rec.Thread, rec.Request)
	sp := w.obs.Start(ctx, e)
	rep, err := w.resumeOne(observe.WithLinks(sp.Ctx, rec.Request.TraceParent), rec, takeBack)
	switch {
	case rep.Resumed > 0:
		e.Outcome = "resumed"
	case rep.Stale > 0:
		e.Outcome = "stale"
	case rep.Deferred > 0:
		e.Outcome = "deferred"
	case rep.Skipped > 0:
		e.Outcome = "skipped"
	case ctx.Err() != nil:
		e.Outcome = "stopped"
	default:
		e.Outcome = observe.OutcomeFailed
	}
	if e.Outcome == "resumed" || e.Outcome == "stale" {
		e.Waited = waited(rec.Request, rec.Decision)
	}
	errFields(&e, err)
	w.obs.End(sp, e)
	return rep, err
}

// resumeOne claims and resumes one decision (see handle).
func (w *Worker) resumeOne(ctx context.Context, rec Record, takeBack string) (WorkerReport, error) {
	var rep WorkerReport
	log := w.o.Logger.With(slog.String("approval", rec.ID), slog.String("thread", rec.Thread))
	id, ok, err := w.claim(ctx, rec, takeBack)
	if err != nil {
		return rep, err
	}
	if !ok {
		rep.Skipped++
		return rep, nil
	}
	if id != "" {
		// Left once the attempt's end is written (or failed to be): a
		// claim no attempt holds is one the worker takes back.
		defer w.leave(id)
	}
	if takeBack != "" {
		log.LogAttrs(ctx, slog.LevelDebug, "took back a claim of this worker's name that had ended", slog.String("claim", takeBack))
		rep.TakenBack++
	}
	rerr := w.callResume(ctx, rec)
	switch {
	case rerr == nil:
		log.LogAttrs(ctx, slog.LevelDebug, "approval resumed", slog.String("outcome", string(rec.Decision.Outcome)))
		rep.Resumed++
		return rep, w.store.FinishResume(ctx, rec.ID, "resumed")
	case notWaiting(rerr):
		log.LogAttrs(ctx, slog.LevelDebug, "thread no longer waits on the approval", slog.String("error", rerr.Error()))
		rep.Stale++
		return rep, w.store.FinishResume(ctx, rec.ID, "the thread no longer waits on this approval: "+rerr.Error())
	case ctx.Err() != nil:
		// Stopping: hand the claim back, so that the next pass (this
		// program run again) resumes at once rather than after Lease, and
		// finds the answer delivered if it was. A worker that dies
		// instead leaves its claim to lapse.
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handBackTimeout)
		defer cancel()
		if herr := w.store.RetryResume(hctx, rec.ID, "the worker stopped before the resume finished: "+rerr.Error(), 0); herr != nil {
			log.LogAttrs(ctx, slog.LevelWarn, "stopped worker could not hand its claim back; it lapses after the lease",
				slog.String("error", herr.Error()), slog.Duration("lease", w.o.Lease))
		}
		return rep, ctx.Err()
	}
	attempts := rec.Resume.Attempts + 1
	if errors.Is(rerr, checkpoint.ErrThreadBusy) || errors.Is(rerr, checkpoint.ErrConflict) {
		attempts = 1
	}
	delay := w.backoff(ctx, attempts)
	log.LogAttrs(ctx, slog.LevelWarn, "resume failed; will retry", slog.String("error", rerr.Error()), slog.Duration("after", delay))
	rep.Deferred++
	if err := w.store.RetryResume(ctx, rec.ID, rerr.Error(), delay); err != nil {
		return rep, err
	}
	if errors.Is(rerr, checkpoint.ErrNotJoinable) {
		// No resume of this worker can succeed: the store and the saver
		// share no transaction. The approval waits, recorded as failed.
		return rep, fmt.Errorf("approval: resume approval %s: %w (open the store on the graph's saver's database, or set WorkerOptions.NoConsume)", quoteShort(rec.ID), rerr)
	}
	return rep, nil
}

// handBackTimeout bounds the write that hands a stopped worker's claim
// back.
const handBackTimeout = 5 * time.Second

// ResumePanicError is a panic recovered from a Worker's ResumeFunc (or,
// In, from the worker's own handling of an approval, or the Error method
// of the ResumeFunc's error): the attempt failed, and the approval is
// resumed again after the worker's backoff, like after any failed
// attempt. Value and Stack are the panic's.
type ResumePanicError struct {
	ID    string // the approval
	In    string // what panicked, "" for the ResumeFunc itself
	Value any
	Stack []byte
}

// Error names the approval and what panicked, and the panic's value.
func (e *ResumePanicError) Error() string {
	in := e.In
	if in == "" {
		in = "the ResumeFunc"
	}
	return fmt.Sprintf("approval: resuming approval %s: %s panicked: %v", quoteShort(e.ID), in, e.Value)
}

// callResume runs the ResumeFunc: a panic is a *ResumePanicError, and its
// error is read once, so that what the worker does with it (log it,
// store its text, match it) calls none of its methods unprotected.
func (w *Worker) callResume(ctx context.Context, rec Record) error {
	var err error
	if w.consumer != nil {
		ctx = withConsumption(ctx, w.consumer.Consumption(rec.ID))
	}
	if p := safe.Call(func() { err = w.resume(ctx, rec) }); p != nil {
		return &ResumePanicError{ID: rec.ID, Value: p.Value, Stack: p.Stack}
	}
	p, w2 := safe.Wrap(err)
	if p != nil {
		return &ResumePanicError{ID: rec.ID, In: "the Error method of the ResumeFunc's error", Value: p.Value, Stack: p.Stack}
	}
	return w2
}

// owns asks WorkerOptions.Threads about rec's thread; one that panics
// owns nothing (logged).
func (w *Worker) owns(ctx context.Context, rec Record) (ok bool) {
	if p := safe.Call(func() { ok = w.o.Threads(rec.Thread) }); p != nil {
		w.o.Logger.LogAttrs(ctx, slog.LevelWarn, "WorkerOptions.Threads panicked; the approval is left to other workers",
			slog.String("approval", rec.ID), slog.String("panic", p.String()))
		return false
	}
	return ok
}

// backoff is the retry policy's wait after attempts failed attempts. A
// policy with a Rand reads the application's reader, under ctx: one that
// panics, or is still reading when ctx ends, leaves the wait unspread
// (logged).
func (w *Worker) backoff(ctx context.Context, attempts int) time.Duration {
	p := *w.o.Retry
	if p.Rand == nil {
		return p.Wait(attempts)
	}
	d, pn, err := safe.Bound(ctx, nil, "the Rand of WorkerOptions.Retry", func() time.Duration { return p.Wait(attempts) })
	switch {
	case pn != nil:
		w.o.Logger.LogAttrs(ctx, slog.LevelWarn, "the Rand of WorkerOptions.Retry panicked; the wait is not spread", slog.String("panic", pn.String()))
	case err != nil:
		w.o.Logger.LogAttrs(ctx, slog.LevelWarn, "the Rand of WorkerOptions.Retry did not return; the wait is not spread", slog.String("error", err.Error()))
	default:
		return d
	}
	return p.Delay(attempts, 0.5)
}

// notWaiting reports whether err says the thread no longer waits on the
// approval, so resuming it again can never succeed.
func notWaiting(err error) bool {
	return errors.Is(err, graph.ErrAlreadyAnswered) || errors.Is(err, graph.ErrNothingToResume) ||
		errors.Is(err, graph.ErrUnknownInterrupt) || errors.Is(err, graph.ErrThreadNotFound)
}

// Run sweeps (when WorkerOptions.Sweeper is set) and resumes due decisions
// every interval (0 means 1s) until ctx is done, and returns ctx's error.
// Failures of a pass are logged and retried at the next one, except that
// of a closed store (matching ErrClosed) and that of a consumption that
// cannot join the saver's transaction (matching checkpoint.ErrNotJoinable:
// the store is on another database, see WorkerOptions.NoConsume): Run
// then returns that error, since no later pass can succeed. A negative interval is an *Error
// matching ErrInvalidConfig, and nothing runs.
func (w *Worker) Run(ctx context.Context, every time.Duration) error {
	if every < 0 {
		return newError("", ErrInvalidConfig, "the worker's interval is %v (0 means 1s)", every)
	}
	if every == 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if w.o.Sweeper != nil {
			if _, err := w.o.Sweeper.Sweep(ctx); err != nil && ctx.Err() == nil {
				w.o.Logger.LogAttrs(ctx, slog.LevelWarn, "approval sweep failed", slog.String("error", err.Error()))
			}
		}
		if _, err := w.RunOnce(ctx); err != nil && ctx.Err() == nil {
			if errors.Is(err, ErrClosed) || errors.Is(err, checkpoint.ErrNotJoinable) {
				return err
			}
			w.o.Logger.LogAttrs(ctx, slog.LevelWarn, "approval worker pass failed", slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
