// Package runstream serves a thread's run as server-sent events that a
// client can rejoin: after a disconnect, to the same process or to any
// other on the same database, it sends everything durable that happened
// after the client's Last-Event-ID, read from the database, and from then
// on the live events of the runs this process streams.
//
// A [Hub] is an http.Handler over one graph.Runnable. Mount it on a
// pattern with a {thread} path value (or set Options.Thread), and give it
// Options.Authorize, which is required: the stream carries the thread's
// state. Runs whose model output and custom events should reach clients
// live are run through the Hub ([Hub.Stream], [Hub.Run]); any other run
// of the thread, in this process or another (a worker's resume), is seen
// through the database.
//
//	hub, err := runstream.New(r, runstream.Options{Authorize: mayRead})
//	mux.Handle("GET /threads/{thread}/events", hub)
//	go hub.Run(ctx, "order-7", graph.StartWith(input))
//
// # What is durable, and what is best effort
//
// Durable events are derived from the thread's checkpoints and the
// writes saved against them, in the thread's root graph. Each has an ID
// ([EventID]) that names the checkpoint whose record holds it and the
// event's place there, so that any process on the database derives the
// same events with the same IDs:
//
//   - values (ID "<checkpoint>.0"): the state at a checkpoint, for every
//     checkpoint of the thread in the order they were saved (input, loop,
//     update and fork checkpoints alike);
//   - updates ("<checkpoint>.<2+i>"): the writes of the i-th task, in plan
//     order, of the step that followed the checkpoint, sent once that
//     step's own checkpoint is saved, before its values (never for the
//     hidden __start__ task, nor for a step whose tasks were discarded by
//     an update or new input);
//   - interrupt ("<checkpoint>.1.<digest>"): the thread's head waits, on
//     the interrupts it lists or at a static breakpoint; failed: a task of
//     the head's next step failed; done: a checkpoint has no task left,
//     the end of a run. The digest sums what the event says, so that a
//     thread that stops at the same checkpoint again differently (a
//     resumed task asked a second question) gets a new event, and one
//     that stops there as it already did gets none.
//
// A pending interrupt therefore reaches a client exactly once, whether it
// was raised while the client was connected or while it was away, and
// however often the client reconnects. An interrupt or failure that was
// resolved (answered, continued) before the client read the thread is
// not sent: the steps that followed it are. A stop identical to the last
// one the client was sent at that checkpoint is not sent again.
//
// Best-effort events carry no ID, so that a reconnecting client's
// Last-Event-ID stays the last durable event it got: messages (a chunk
// of a model's output, graph.EventMessages) and custom (a value a node
// emitted, graph.EventCustom), with the task's node, ID, step and, inside
// a subgraph, its namespace ("ns"). They exist only in the process that
// runs the task, and only for runs streamed through the Hub. They are
// lost for a client that is away, for a client of another process, and
// for a client too slow to take them (Options.Queue); they are sent again
// by a task that runs again. What a model said is durable in the
// update of its node. Once a stream has caught up, the best-effort
// events of a run this Hub streams arrive in order with its durable
// ones; while a stream catches up (when it starts, and on a poll) a
// best-effort event may arrive after durable events saved after it.
//
// Subgraphs' own checkpoints are not streamed: a subgraph's work shows
// in the updates and values of the parent's step that ran it.
//
// # Joining and rejoining
//
// A client without Last-Event-ID (the header, or the last_event_id query
// parameter for a first connection) starts at the thread's head: its
// values and where the thread stands, then what follows, never the
// thread's history. A thread with no checkpoint yet is followed from its
// first. A client with Last-Event-ID gets the events after it, oldest
// first, and then follows.
//
// A Last-Event-ID that is not one the handler sends is refused with 400
// and an *EventIDError matching [ErrBadEventID]; one that is well formed
// but names no event of the thread (another thread's, a pruned
// checkpoint's) with 400 and [ErrUnknownEventID]. Neither is ever read as
// "from the start": the client reconnects without Last-Event-ID.
//
// # Bounds
//
// Every resource a client can hold is bounded (see [Options]): open
// streams (MaxClients, 503 beyond), the checkpoints one catch-up reads
// (MaxReplay, 410 [ErrTooFarBehind] beyond), an event's data
// (MaxEventBytes: a larger durable event is sent as a stub with its ID,
// "truncated": true and its size; a larger best-effort one is dropped),
// the best-effort events queued for a slow client (Queue), and every
// write (WriteTimeout: a client that stops reading is disconnected). A
// run never waits for a client: a follower is handed events without
// blocking, and what it misses of the durable stream it reads from the
// database. A stream ends when the request's context ends, the client
// goes away, or [Hub.Close] is called; it leaves no goroutine behind.
// Options.Authorize, Options.Thread and the MarshalJSON methods of the
// state and of emitted values are contained: a panic refuses the request
// or loses the value, and a MarshalJSON that blocks past WriteTimeout is
// given up on ([Hub.Abandoned]).
//
// # Event data
//
// Each event's data is one JSON object: values {"checkpoint", "step",
// "values"}; updates {"checkpoint" (the step's starting checkpoint),
// "step", "node", "task", "update" (field name to JSON)}; interrupt
// {"checkpoint", "step", "interrupts" ([{"id", "value"}]), "next",
// "breakpoint"}; failed {"checkpoint", "step", "errors" ([{"task",
// "node", "type", "message"}]), "next"}; done {"checkpoint", "step"};
// messages and custom {"ns", "step", "node", "task", "data"}. A stream
// that fails after it started (the saver failed) sends an error event
// {"message"} and ends; the client reconnects with its Last-Event-ID.
package runstream
