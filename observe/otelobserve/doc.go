// Package otelobserve turns lockstep's observation events (package
// observe) into OpenTelemetry spans and metrics. It is the only package of
// lockstep that imports OpenTelemetry: graph, nodes and approval emit
// their events through observe.Hook, and a *Hook from New is one.
//
//	h, err := otelobserve.New(otelobserve.Options{TracerProvider: tp, MeterProvider: mp, Pending: inbox})
//	r, err := g.Compile(graph.WithSaver(saver), graph.WithObserver(h))
//	ex, err := nodes.NewExecutor(tools, nodes.WithObserver(h))
//	worker, err := approval.NewWorker(store, approval.ResumeGraph(r), approval.WorkerOptions{Observer: h})
//
// # Spans
//
// A run is a span (SpanRun: lockstep.thread, lockstep.run.id,
// lockstep.run.mode: input, resume, continue or replay) holding one span
// per superstep (SpanStep: lockstep.step, lockstep.step.tasks), and a
// step holds its tasks ("lockstep.task NODE": lockstep.node,
// lockstep.task.id, and at the end lockstep.attempts). A task holds the
// tool calls its node makes ("execute_tool TOOL", with the GenAI
// attributes gen_ai.operation.name, gen_ai.tool.name and
// gen_ai.tool.call.id) and the model calls ("chat MODEL", a client span
// with gen_ai.operation.name chat, gen_ai.provider.name,
// gen_ai.request.model, and gen_ai.usage.input_tokens and
// gen_ai.usage.output_tokens where the model's client reported them). The
// executor's decisions are events of the tool call's span
// (EventDecision, lockstep.decision: allowed, blocked, cache_hit,
// replayed, retry with lockstep.retry.class and lockstep.retry.delay_ms,
// fallback, executed, failed); a node's retries (EventRetry), the
// approval requests a tool node raises (EventApprovalRaised) and lease
// conflicts (EventLeaseConflict) are events of their task, or of the
// span the refused saver call happened under. An inbox's decisions and
// the approval worker's resumes are spans of their own
// (SpanApprovalDecide, SpanApprovalResume).
//
// A saver call is an event of the span it happens under (EventSaver, as
// it ends): the run's for the run's first read and claim, a step's for
// its checkpoint, a task's for the writes its node saves at once. It
// carries lockstep.saver.operation (put, put_writes, claim, release,
// get), lockstep.saver.bytes (what a put or put_writes writes, what a
// get read), lockstep.saver.duration_ms and lockstep.outcome; a call
// that failed adds error.type (the error's Go type, or _OTHER) and
// lockstep.error, and leaves the status to the span it is on, which ends
// as the failure reached it. A saver call outside any span (a GetState
// whose context carries none) is not recorded. With
// Options.SaverSpans, every saver call is a span of its own instead
// ("lockstep.saver OP", a child of the same span, with the operation,
// bytes and outcome, and an error status when it failed): a timeline shows each
// call, at the cost of a span per call (twelve for a run of ten steps;
// see docs/benchmarks.md, Tracing).
//
// Every span ends with lockstep.outcome. Only a failure sets the span's
// status to Error (with error.type and an exception event): a run that
// waits for a human ends with outcome waiting and status Unset, a run its
// caller stopped with outcome cancelled, a blocked or rejected tool call
// with its executor status.
//
// # Links across processes
//
// The tool node stores the W3C traceparent of the task that raised an
// approval request with the request (approval.Request.TraceParent, kept
// by every approval store). The approval worker's resume span, and the
// run it starts, link to it (a span link to a remote span context), in
// whichever process the worker runs: a tracing backend shows the run
// that resumed next to the one that asked.
//
// # Metrics
//
// lockstep.step.duration and lockstep.task.duration (histograms, seconds,
// by outcome; tasks also by node), lockstep.tool.calls (by tool and
// outcome), lockstep.tool.decisions (by tool and decision),
// lockstep.retries (by lockstep.retry.class, and tool or node),
// lockstep.lease.conflicts (by saver operation),
// lockstep.approval.decision_time (histogram, seconds, by tool, risk and
// outcome), lockstep.approval.pending (a gauge by tool and risk tier,
// read from Options.Pending at each collection), and the GenAI client
// metrics gen_ai.client.operation.duration and gen_ai.client.token.usage.
// Metric attributes are names and outcomes, never thread or run IDs.
//
// # Cost
//
// The hook does no I/O: spans go to the TracerProvider's processors and
// metrics to the MeterProvider's aggregation. Events carry names, IDs and
// counts, never state values, tool arguments or results.
//
// A run's spans (its steps', tasks', tool and model calls') are ended
// when their operations end (their end times are their own) but handed
// to the span processors together, when the run's span ends: a batching
// processor (sdktrace.WithBatcher) wakes its goroutine for every span it
// is handed while that goroutine waits, which costs a traced run more CPU
// than making its spans, and a run's spans handed on back to back wake it
// about once. A run that goes on hands on what it holds once
// Options.SpanDelay (DefaultSpanDelay, a second) has passed since the
// first of it ended, so that a stuck run's finished steps still reach the
// exporter, and once it holds 256 spans. A process that dies loses what
// its runs hold, as it loses what a batching processor queued.
//
// A step's and a task's spans, a run's most, get their attributes as
// they end, in one call with their outcome (the events that end them
// repeat those that began them): the SDK copies a span's attributes and
// grows them at every call. A sampler or a span processor's OnStart sees
// their name, kind and parent, and no attributes (the SDK's ParentBased
// sampler, its default, reads none); the other spans, the run's among
// them, carry theirs from their start.
package otelobserve
