// Package testhook lets lockstep's own tests stop or kill a graph run at
// named points inside the runner without a public API for it: a test puts
// a hook in the context it runs with (With), and package graph calls it at
// the points below while it runs with that context or one derived from it
// (Invoke, Resume, Continue, Replay, Stream and UpdateState). Code outside
// this module cannot import the package, so it cannot set a hook; without
// one a run pays a single context lookup.
//
// The SQLite saver's points are not here: they come from
// sqlite.Config.Hook, because they include Open's, and Open takes no
// context. Crash tests pass the same function to both. Code that a test's
// run calls (a tool body, a fake service) marks points of its own with
// Hit.
//
// A hook runs on the runner's goroutines (the tasks of one step call it
// from their own): it must be safe for concurrent use, fast, and must not
// call back into the Runnable. It may kill the process, cancel the run's
// context or block. The package holds no state.
package testhook

import "context"

// The graph runner's points, in the order a step meets them.
const (
	GraphAfterTask  = "graph.afterTask"  // a node returned; its writes are not saved yet
	GraphBeforeSave = "graph.beforeSave" // a step's checkpoint is about to be saved
	GraphAfterSave  = "graph.afterSave"  // the saver returned; the run has not moved on
)

type key struct{}

// With returns a copy of ctx that carries fn: a graph run given that
// context calls fn(point) at each of its points. A nil fn removes a hook
// ctx carried.
func With(ctx context.Context, fn func(point string)) context.Context {
	return context.WithValue(ctx, key{}, fn)
}

// From returns the hook ctx carries, or nil.
func From(ctx context.Context) func(point string) {
	fn, _ := ctx.Value(key{}).(func(point string))
	return fn
}

// Hit calls the hook ctx carries, if any, at point: for points of a test's
// own code (a tool body around its write), in the context that code was
// given.
func Hit(ctx context.Context, point string) {
	if fn := From(ctx); fn != nil {
		fn(point)
	}
}
