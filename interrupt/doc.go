// Package interrupt defines how a node pauses a run to wait for a human, and
// how the answer reaches it when the run resumes.
//
// A node pauses in one of two ways:
//
//   - It returns a [*NodeInterrupt] (the static form, LangGraph's legacy
//     NodeInterrupt). The run stops; the value is saved with the task. There
//     is no answer to deliver (a resume that answers it is refused): a
//     reviewer changes the state so that the node runs again against it
//     (in package graph, Resume with Command.Update alone, or UpdateState
//     as the node before it and Continue).
//   - It calls [Ask] (the dynamic form). When an answer is waiting, Ask
//     returns it, decoded into the caller's type. When none is, Ask returns an
//     [*Error] that the node returns (wrapped or not); the run stops and saves
//     the question. On resume the node runs again from its first line and the
//     same Ask call now returns the answer. Several Ask calls in one node are
//     answered in call order, one resume at a time. [AskKey] names a call
//     by a key instead of its position, so that calls may come in any
//     order, from several goroutines, and several of them may be pending
//     at once, each answered by its ID.
//
// # Identity
//
// Every interrupt has an ID: 32 lowercase hex characters derived from the
// task that raised it and the position of the Ask call in that task (see
// [ID]), or the key of the AskKey call ([KeyID]); the two kinds never
// collide. The ID is stable for a task across resumes and distinct for every
// parallel task and every Ask call, so several pending interrupts can be
// answered by ID. A fork of an old checkpoint gets new task IDs, so its
// interrupts get new IDs too.
//
// # Contract with the runtime
//
// This package imports nothing else from lockstep. The runtime (package
// graph) installs a [Resumer] in the context it hands to a node; [Ask] asks
// the Resumer for the answer to its call. Outside a runtime Ask returns
// [ErrNoRuntime]. Interrupt values and answers are JSON: a value that cannot
// be encoded is a [*ValueError] (matching [ErrNotSerializable]), never an
// interrupt. Code that runs other code under its context can install a
// [Filter] with [WithFilter]: Ask and AskKey pass every encoded question
// through it before the Resumer records it (package nodes redacts the
// secrets a tool body holds this way).
//
// # Errors
//
// [Ask] returns an [*Error] (pause), a [*ValueError] (the question cannot be
// encoded), an [*AnswerError] (the saved answer does not decode into the
// requested type), an error matching [ErrAbandoned] or [ErrNoRuntime].
//
// # Application code
//
// The question's MarshalJSON, the answer type's UnmarshalJSON and the
// filters are the application's code. A panic in any of them, or in the
// Error method of an error they return, is an error ([*ValueError] for
// the question and filters, [*AnswerError] for the answer), never a
// panic out of Ask. When the context can end, Ask runs them on a
// goroutine of its own and gives up on one still running 100 ms after the
// context ended: it returns an error matching [ErrAbandoned] and the
// context's, raises nothing, and tells a Resumer that implements
// [Abandoner], which counts the call until it returns. Use [Is] to recognise a pause through
// any wrapping; a pause is never a failure and is never retried.
//
// # Concurrency
//
// The package holds no state: its functions are safe for concurrent use.
// Ask identifies a call by its position, so one node's Ask calls must be
// made one after the other, from one goroutine; AskKey calls may run in
// parallel. The Resumer a runtime installs must be safe for the calls it
// allows.
package interrupt
