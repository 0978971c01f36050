package crashtest

import "slices"

// Point names a place in the engine (or in a scenario) where a crash can be
// injected. The engine's points are the strings its hooks pass (the graph
// runner's, see internal/testhook, and sqlite.Config.Hook); the scenario's
// points are hit by the test's own code through Hook.Hit. The values are
// fixed: a test of this package checks that they equal the engine's.
type Point string

// The crash points, in the order a step of a run meets them.
const (
	// AfterClaim: a message ID was claimed (ledger.ClaimMessageTx) and the
	// message's effect is not written yet. The claim and the effect share
	// one transaction, so a crash here must roll both back: the
	// redelivered message is processed cleanly (R44).
	AfterClaim Point = "crashtest.afterClaim"
	// AfterNode: a node returned and its writes are not saved yet
	// (testhook.GraphAfterTask). The node runs again after a restart (R01).
	AfterNode Point = "graph.afterTask"
	// WritesBegin: inside the transaction that saves a finished task's
	// pending writes, after BEGIN IMMEDIATE (sqlite "sqlite.writes.begin").
	WritesBegin Point = "sqlite.writes.begin"
	// WritesBeforeCommit: the pending writes are written, COMMIT is not
	// (sqlite "sqlite.writes.beforeCommit").
	WritesBeforeCommit Point = "sqlite.writes.beforeCommit"
	// WritesAfterCommit: the pending writes are committed and the runtime
	// has not heard back (sqlite "sqlite.writes.afterCommit"). The task
	// must not run again after a restart (R05).
	WritesAfterCommit Point = "sqlite.writes.afterCommit"
	// BeforeSave: a step's checkpoint is about to be saved
	// (testhook.GraphBeforeSave).
	BeforeSave Point = "graph.beforeSave"
	// PutBegin: inside the checkpoint transaction, after BEGIN IMMEDIATE
	// (sqlite "sqlite.put.begin"). The previous head must survive whole
	// (R02).
	PutBegin Point = "sqlite.put.begin"
	// PutBeforeCommit: the checkpoint, its blobs and writes are written,
	// COMMIT is not (sqlite "sqlite.put.beforeCommit"; R02).
	PutBeforeCommit Point = "sqlite.put.beforeCommit"
	// PutAfterCommit: the checkpoint is committed and not acknowledged
	// (sqlite "sqlite.put.afterCommit"). It must be there after the
	// restart, and its step must not run again (R03).
	PutAfterCommit Point = "sqlite.put.afterCommit"
	// AfterSave: the saver returned and the run has not moved on
	// (testhook.GraphAfterSave); the checkpoint was acknowledged (R03).
	AfterSave Point = "graph.afterSave"
	// AfterToolEffect: a tool's side effect happened downstream and the
	// ledger has not recorded its outcome: the window no engine can close.
	// The re-run must carry the same idempotency key, so that a
	// key-honouring service applies the effect once (R34).
	AfterToolEffect Point = "crashtest.afterToolEffect"
	// AfterDecision: a reviewer's decision was recorded (Inbox.Decide
	// returned) and no worker resumed the thread yet. A worker after the
	// restart resumes it exactly once (R37).
	AfterDecision Point = "crashtest.afterDecision"
)

// PointInfo describes a crash point.
type PointInfo struct {
	Point Point
	// Engine says whether the engine calls the point through its hooks
	// (true) or the scenario's code does (false).
	Engine bool
	// Meaning is what has and has not happened when the process dies
	// there.
	Meaning string
}

// Points returns every crash point with its meaning, in the order a step
// meets them.
func Points() []PointInfo {
	return []PointInfo{
		{AfterClaim, false, "message ID claimed, its effect not written (same transaction)"},
		{AfterNode, true, "node returned, its writes not saved"},
		{WritesBegin, true, "inside the pending-writes transaction, after BEGIN"},
		{WritesBeforeCommit, true, "pending writes written, before COMMIT"},
		{WritesAfterCommit, true, "pending writes committed, not acknowledged"},
		{BeforeSave, true, "step done, its checkpoint about to be saved"},
		{PutBegin, true, "inside the checkpoint transaction, after BEGIN"},
		{PutBeforeCommit, true, "checkpoint written, before COMMIT"},
		{PutAfterCommit, true, "checkpoint committed, not acknowledged"},
		{AfterSave, true, "checkpoint acknowledged, run not moved on"},
		{AfterToolEffect, false, "tool's effect happened downstream, ledger outcome not recorded"},
		{AfterDecision, false, "approval decided, thread not resumed"},
	}
}

// The Postgres saver's commit points (postgres.Config.Hook), named as the
// SQLite saver's are where they mean the same.
const (
	PGPutBegin           Point = "postgres.put.begin"
	PGPutBeforeCommit    Point = "postgres.put.beforeCommit"
	PGPutAfterCommit     Point = "postgres.put.afterCommit"
	PGWritesBegin        Point = "postgres.writes.begin"
	PGWritesBeforeCommit Point = "postgres.writes.beforeCommit"
	PGWritesAfterCommit  Point = "postgres.writes.afterCommit"
	// PGJoinBeforeCommit and PGJoinAfterCommit follow a save's own points
	// when it carries joins: an approval consumed with the answer it
	// delivers, a ledger outcome with the durable step's result (D16).
	PGJoinBeforeCommit Point = "postgres.join.beforeCommit"
	PGJoinAfterCommit  Point = "postgres.join.afterCommit"
	// The fenced transactions: a fenced ledger's intents (D17).
	PGFencedBegin        Point = "postgres.fenced.begin"
	PGFencedBeforeCommit Point = "postgres.fenced.beforeCommit"
	PGFencedAfterCommit  Point = "postgres.fenced.afterCommit"
	// A lease taken or renewed (Claim).
	PGLeaseBegin        Point = "postgres.lease.begin"
	PGLeaseBeforeCommit Point = "postgres.lease.beforeCommit"
	PGLeaseAfterCommit  Point = "postgres.lease.afterCommit"
)

// PostgresPoints returns the Postgres saver's commit points with their
// meanings. A run on Postgres meets them instead of the SQLite saver's
// (the graph's and the scenario's points are the same on both).
func PostgresPoints() []PointInfo {
	return []PointInfo{
		{PGPutBegin, true, "inside a checkpoint's explicit transaction, after BEGIN"},
		{PGPutBeforeCommit, true, "checkpoint written (or, in one round trip, about to be sent), before COMMIT"},
		{PGPutAfterCommit, true, "checkpoint committed, not acknowledged"},
		{PGWritesBegin, true, "inside a pending-writes explicit transaction, after BEGIN"},
		{PGWritesBeforeCommit, true, "pending writes written (or about to be sent), before COMMIT"},
		{PGWritesAfterCommit, true, "pending writes committed, not acknowledged"},
		{PGJoinBeforeCommit, true, "a save's joins (a consumption, a ledger outcome) ran in its transaction, before COMMIT"},
		{PGJoinAfterCommit, true, "a save and its joins committed together, not acknowledged"},
		{PGFencedBegin, true, "inside a fenced transaction, the lease checked, before its work"},
		{PGFencedBeforeCommit, true, "a fenced write (a ledger intent) written, before COMMIT"},
		{PGFencedAfterCommit, true, "a fenced write committed, not acknowledged"},
		{PGLeaseBegin, true, "inside a subgraph's lease transaction, after BEGIN"},
		{PGLeaseBeforeCommit, true, "a lease claim or renewal about to be sent"},
		{PGLeaseAfterCommit, true, "a lease taken or renewed, not acknowledged"},
	}
}

// Known reports whether p is one of the points of Points or
// PostgresPoints.
func Known(p Point) bool {
	for _, pi := range slices.Concat(Points(), PostgresPoints()) {
		if pi.Point == p {
			return true
		}
	}
	return false
}
