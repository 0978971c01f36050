// Package workers runs a graph's threads on a pool of workers that any
// number of processes, on any number of machines, run against one
// database, with no coordinator: each worker claims the threads that have
// work due from the saver's database, runs them with bounded concurrency,
// and records what each run left.
//
//	pool, err := workers.New(runnable, workers.Options{Concurrency: 16, Approvals: store})
//	...
//	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
//	defer stop()
//	err = pool.Run(ctx) // until SIGTERM; then hands back what it holds
//
// # Due work
//
// A thread has work due when (checkpoint.DueWork):
//
//   - a run stopped before its end and nothing holds the thread any more:
//     its runner died (its lease expired, never released), or a pool
//     handed it back on shutdown, or a run a pool started was cut short
//     (a lost database): the run is continued (graph.Runnable.Continue);
//   - input is queued for it (Submit with QueueIfBusy): the oldest is
//     applied (graph.Runnable.Invoke with the input's run key), one run
//     at a time, in order;
//   - a failed attempt is scheduled to be retried, as Options.Retry
//     spaces and bounds them;
//   - an approval of its was decided (with Options.Approvals): its thread
//     is resumed with the decision, by an approval.Worker on the same
//     store whose resumes run on the pool's slots.
//
// The pool runs on a saver that keeps due work and queued input
// (checkpoint.DueWork and checkpoint.InputQueue: the memory saver, for
// one process, the SQLite saver and the Postgres saver); New fails with
// ErrUnsupported for one that does not. On SQLite the claims are the
// database's one writer at a time, so that two workers never claim one
// thread; on Postgres a claim locks the due threads' rows FOR UPDATE SKIP
// LOCKED, so that workers claiming at once skip each other's rows instead
// of waiting for them. A claim is the thread's lease (checkpoint.Lease) under
// the Runnable's runner name, which the run the pool starts takes over; the
// run renews it while it works (graph.WithLeaseTTL). A claimed thread stays
// marked due until the pool settles it, so work is never lost: a worker
// that dies leaves its threads due once their leases lapse (within one
// lease period of its death: the last renewal was at most a lease period
// before), and another worker claims them then, unless a worker of the
// same name takes them back first (see Names and take-back); the pool also wakes at the
// end of every lease it knows of, not only every Options.Poll.
//
// # Names and take-back
//
// A pool's name is its Runnable's runner name (graph.WithRunner): its
// claims' leases name it, and so do its approval worker's claims (the
// approval worker is named after it unless Options.Approval.Name is set).
// The default runner name is random per Runnable, so a process that dies
// leaves its threads leased until their leases lapse. Give each worker
// process a name that stays the same across its restarts
// ("billing-worker-1"): when a pool starts (its first Run or RunOnce) it
// takes back at once every thread whose live lease names its runner but
// no run of its own process, as a killed predecessor of the same name left
// them, and works on each as on a claimed thread (Report.TakenBack counts
// them). Each take-back grows the thread's lease epoch, so that the
// predecessor, if it is in fact alive (paused, or cut off from the
// database, rather than dead), is refused by the fence: none of its writes
// lands, and nothing runs twice. It needs a saver that lists leases by
// runner (checkpoint.RunnerLeases: the memory, SQLite and Postgres
// savers).
//
// Names must be unique among the processes that run at the same time.
// When two live pools share one, the one that starts later takes the
// other's threads back: the older is fenced (its runs fail with an error
// matching checkpoint.ErrThreadBusy and are settled as lost claims), so
// no effect happens twice and nothing is lost, but the older pool's work
// in flight is thrown away, and each restart of either repeats it.
//
// # Shutdown
//
// When Run's context ends, the pool stops claiming, lets the runs in
// flight finish for up to Options.Drain, then cancels them: each stops at
// its next step boundary (its nodes see the cancellation), releases its
// lease and leaves the thread due, so another worker takes it at once.
//
// # Input
//
// Submit applies new input to a thread through the pool: at once when the
// thread is idle; when it is busy (a run holds it), waiting on an
// interrupt, has queued input ahead, or has unfinished work, the caller
// chooses (LangGraph's concurrent-input policies): refuse, the default, a
// *RefusedError; or queue it behind the current run (QueueIfBusy), stored
// in the database in order. Each queued input is applied exactly once,
// also across crashes: the run applying it carries the input's key as its
// graph.RunKey, and a worker that finds the key on the thread's input
// checkpoints drops the input instead of applying it again. Input queued
// behind an interrupt waits until it is answered and the resumed run
// ends: new input never discards a pending approval. Wait blocks until a
// queued input was applied.
//
// # Failures
//
// A run that fails with a node's error leaves its thread failed, as
// graph.Runnable.Invoke does: the pool does not retry it (the node's own
// retry policy ran), and the thread's queued input goes on after it. A run
// that makes no progress (a store error, a lost database: the thread is
// pending, or queued input was not applied) is retried as Options.Retry
// says; after its last attempt the thread stays as it is until someone
// continues it. Everything a pool calls of the application's (Options.IDs,
// the Rand of Options.Retry, the JSON methods of queued state values) is
// contained: a panic there is logged and replaced by the default, or
// refuses the input.
//
// # Errors
//
// New returns a *ConfigError (ErrInvalidConfig) and ErrUnsupported;
// Submit returns a *RefusedError (ErrRefused), ErrInvalidInput and the
// run's errors; Wait returns ErrDropped; Run returns ErrRunning and its
// context's error. Match them with errors.Is and errors.As.
package workers
