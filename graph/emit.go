package graph

import "context"

// Emit sends value to the run's stream as an EventCustom event of the
// task ctx belongs to (a node's context, or a tool body's, which runs
// with its task's), and reports whether a consumer took it. It returns
// false, and does nothing else, when the run is not streamed (Invoke,
// Resume, Continue, Replay), when ctx is not a task's, and once the
// consumer stopped reading or the run returned. A custom event is best
// effort: it is never saved, and a task that runs again (a retry, a
// resume) emits again. The consumer receives value as it is: do not
// change it after Emit.
//
// Emit blocks while the consumer handles the event, as every streamed
// event does; events of tasks running in parallel reach it one at a
// time. Inside a subgraph the event carries the subgraph's namespace
// (Event.NS) when the root run streams its subgraphs (StreamSubgraphs).
func Emit(ctx context.Context, value any) bool { return emitKind(ctx, EventCustom, value) }

// EmitMessage sends chunk, a piece of a model's output, to the run's
// stream as an EventMessages event of the task ctx belongs to, as Emit
// does with a custom value. Model nodes call it (package nodes streams
// nodes.MessageChunk values); it reports false when nothing takes the
// chunk.
func EmitMessage(ctx context.Context, chunk any) bool { return emitKind(ctx, EventMessages, chunk) }

// Streaming reports whether the run of the task ctx belongs to is
// streamed, so that Emit and EmitMessage can deliver: a model node asks
// for its client's token stream only then, and a run that is not
// streamed costs nothing extra.
func Streaming(ctx context.Context) bool {
	sp, ok := scratchOf(ctx)
	return ok && sp.stream != nil
}

func emitKind(ctx context.Context, kind EventKind, data any) bool {
	sp, ok := scratchOf(ctx)
	if !ok || sp.stream == nil {
		return false
	}
	return sp.stream(kind, data)
}
