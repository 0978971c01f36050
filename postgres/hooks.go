package postgres

// The points at which the saver calls Config.Hook around its writes (the
// names of the SQLite saver's points where the meaning is the same, with
// "postgres." for "sqlite."). A write in an explicit transaction calls
// ".begin" after BEGIN, ".beforeCommit" once its statements ran and
// before COMMIT, and ".afterCommit" once COMMIT returned and before the
// caller hears of it. A write of one round trip (one statement, or a
// batch committed as one implicit transaction) has no ".begin": it calls
// ".beforeCommit" just before it is sent (its COMMIT comes with it) and
// ".afterCommit" once the server answered that it wrote. A write that is
// refused (a conflict, a busy lease) calls no ".afterCommit".
const (
	// A checkpoint, or a chain of them (Put, PutChain).
	pointPutBegin        = "postgres.put.begin"
	pointPutBeforeCommit = "postgres.put.beforeCommit"
	pointPutAfterCommit  = "postgres.put.afterCommit"
	// Pending writes (PutWrites).
	pointWritesBegin        = "postgres.writes.begin"
	pointWritesBeforeCommit = "postgres.writes.beforeCommit"
	pointWritesAfterCommit  = "postgres.writes.afterCommit"
	// A Put or PutWrites that carries joins (an approval's consumption, a
	// ledger outcome: checkpoint.Join) calls these right after its own
	// ".beforeCommit" (the joins ran in its transaction) and
	// ".afterCommit": the joint commit of D16 work with the save.
	pointJoinBeforeCommit = "postgres.join.beforeCommit"
	pointJoinAfterCommit  = "postgres.join.afterCommit"
	// A fenced write (Saver.Fenced, and a fenced ledger's intents and
	// outcomes that commit on their own): ".begin" once the thread's root
	// row is locked and its lease checked, before the work runs.
	pointFencedBegin        = "postgres.fenced.begin"
	pointFencedBeforeCommit = "postgres.fenced.beforeCommit"
	pointFencedAfterCommit  = "postgres.fenced.afterCommit"
	// A lease taken or renewed (Claim).
	pointLeaseBegin        = "postgres.lease.begin"
	pointLeaseBeforeCommit = "postgres.lease.beforeCommit"
	pointLeaseAfterCommit  = "postgres.lease.afterCommit"
)

// writePoints are the hook points of a write in an explicit transaction.
type writePoints struct{ begin, beforeCommit, afterCommit string }

var (
	putPoints    = writePoints{pointPutBegin, pointPutBeforeCommit, pointPutAfterCommit}
	writesPoints = writePoints{pointWritesBegin, pointWritesBeforeCommit, pointWritesAfterCommit}
	leasePoints  = writePoints{pointLeaseBegin, pointLeaseBeforeCommit, pointLeaseAfterCommit}
)
