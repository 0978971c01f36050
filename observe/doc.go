// Package observe is how lockstep's runtime tells an observer what it
// does: the one hook through which runs, supersteps, tasks, saver calls,
// tool calls and the executor's decisions, model calls, approvals and
// lease conflicts are seen. An adapter turns the events into traces and
// metrics (package observe/otelobserve, over OpenTelemetry); tests record
// them. The package imports nothing but the standard library, so that
// every part of lockstep can take a Hook without depending on another,
// and none of them imports a tracing library.
//
// # Where a hook goes
//
// Each part that emits events takes the hook as an option of its own:
// graph.WithObserver (runs, steps, tasks, saver calls, lease conflicts),
// nodes.WithObserver (tool calls and the executor's decisions, the
// approval requests the tool node raises, and, in a prebuilt agent, model
// calls; nodes.WithModelObserver for a model node built alone), and
// approval's Inbox.WithObserver (decisions) and WorkerOptions.Observer
// (resumes). Give all of them the same hook. Without one a part pays a
// nil check per event and allocates nothing.
//
// # Spans and notes
//
// An operation is a pair of calls: Start when it begins and End when it
// ends. Start returns the context the operation's children run with (an
// adapter puts its span in it); the runtime runs them with that context,
// on whatever goroutine they run, and passes it to End, so that a tree of
// operations nests as it ran: a run holds its steps, a step its tasks and
// saver calls, a task the tool and model calls its node makes, a tool
// call its fallback. A node's own code runs with its task's context, so
// what it traces itself (an HTTP client's spans) nests under the task.
// End is called once for every Start that returned, and never for one
// that panicked. Note is an instant event inside the operation its
// context carries: an executor's decision, a node's retry, a lease
// conflict, an approval request raised.
//
// The runtime never stores a context the hook returned beyond the
// operation, and it never waits for the hook's work to be exported.
//
// # Links across processes
//
// TraceParent returns the W3C traceparent of the operation a context
// carries. The tool node stores it with every approval request it raises
// (approval.Request.TraceParent, persisted by every approval store); the
// approval worker that resumes the decided request, maybe in another
// process, puts it in the resume's context (WithLinks), and the run it
// starts carries it in Event.Links, so a tracing backend links the run
// that resumed to the one that asked.
//
// # Containment
//
// A hook is application code to the runtime. A panic in one of its
// methods is recovered, logged at Warn on the emitting part's logger, and
// loses that event: the run goes on. A call that has not returned when
// the context it was given ends (the run's deadline) is given up on, the
// run goes on without it, and that part calls the hook no more. A hook
// that never returns under a context that cannot end holds its caller, as
// any application code does. Methods are called from many goroutines at
// once and must be safe for concurrent use; they should be fast and never
// block on I/O.
//
// To give a call up, the runtime runs it on a goroutine of its own when
// its context can end, which costs a goroutine and two wake-ups per
// event. A hook that never blocks (it only records in memory: an
// OpenTelemetry SDK with batching span processors, a counter) can say so
// with [Inline]; its methods are then called on the caller's goroutine.
// A panic in them is still recovered and loses the event. What the
// opt-in costs is the bound: a call that blocks holds the run, past its
// context's deadline, until it returns, and is never given up on or
// counted as abandoned.
//
// # What events carry
//
// Event is one flat struct; each Kind's documentation says which fields it
// sets. Events carry names, IDs, counts, durations and redacted error
// text: never state values, tool arguments or results, or secrets. NS is
// the subgraph namespace of the operation ("" for the root graph).
package observe
