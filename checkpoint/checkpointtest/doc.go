// Package checkpointtest is the conformance suite every [checkpoint.Saver]
// must pass. It pins the contract written in package checkpoint (doc
// comments of Saver, Checkpoint, GetOptions, ListOptions, WriteIndex and the
// optional interfaces), LangGraph's saver conformance checks that apply to
// it (docs/semantics.md §8.3), and lockstep's own rules: compare-and-swap on the
// thread's head, leases, delta storage with append chains, idempotent
// pending writes across a reopen, and the cross-thread pending-interrupt
// query.
//
// # Wiring a saver in
//
// A saver's package runs the suite from one test, giving a constructor for
// an empty saver and, when the saver persists anything, a way to reopen it:
//
//	func TestSaver(t *testing.T) {
//		checkpointtest.Run(t, checkpointtest.Options{
//			New: func(t *testing.T, now checkpoint.Clock) checkpoint.Saver {
//				// A new database under t.TempDir() whose saver reads time
//				// from now, closed by t.Cleanup.
//				return openTemp(t, now)
//			},
//			Reopen: func(t *testing.T, s checkpoint.Saver) checkpoint.Saver {
//				// Close s and open the same database again, with the
//				// clock s was opened with.
//				return reopen(t, s)
//			},
//		})
//	}
//
// MemorySaver's own test is the smallest example:
//
//	checkpointtest.Run(t, checkpointtest.Options{
//		New: func(t *testing.T, now checkpoint.Clock) checkpoint.Saver {
//			return checkpoint.NewMemorySaver(now)
//		},
//	})
//
// New is called once per subtest, and subtests run in parallel, so it must
// return a fresh, empty, independent saver each time (a new temporary file,
// not a shared one) and be safe to call concurrently. The saver must read
// the current time only from now: the suite passes a fake clock and moves
// it forward to expire leases and to order threads and interrupts. New
// registers its own cleanup (closing, removing files) with t.Cleanup.
//
// Reopen closes s and returns a new saver over the same storage, as after a
// process restart; it must give the new saver the clock New received for s.
// When Reopen is nil the reopen cases are skipped. The in-memory saver
// passes an identity Reopen, which exercises the cases without testing
// persistence.
//
// # What it checks
//
// Run runs one subtest group per capability; each case gets its own saver:
//
//   - PutGet: every Checkpoint field round-trips (CreatedAt as an instant),
//     namespaces and threads are isolated even when checkpoint IDs repeat,
//     the head is the latest Put, and missing threads or IDs give
//     checkpoint.ErrNotFound.
//   - Delta: only changed channels carry blobs and the rest still load;
//     append chains rebuild exactly across hundreds of versions mixed with
//     replacements; dropped channels disappear; GetOptions.Have may trim
//     or not, and what is returned rebuilds the right value; broken chains
//     never decode silently.
//   - PendingWrites: ordering by task then WriteIndex, insert-if-absent
//     regular writes, replacing special writes, PutRequest.ParentWrites and
//     Writes landing atomically with the Put.
//   - SingleWriter: the parent compare-and-swap, forks, and writes or claims
//     naming a checkpoint that is not the head.
//   - Leases: busy, renew, release, expiry and takeover, and LangGraph's
//     write-ownership clauses (a superseded runner is told it lost and
//     writes nothing); a runner takes back the live lease of the one run
//     of its own it names (Lease.TakeBack) through Claim, Put and
//     PutWrites, and no one else does: not another runner, not a request
//     naming another run of the runner, not one naming a run whose lease
//     passed to another run since.
//   - Concurrency: racing Puts on one parent leave exactly one child;
//     concurrent pending writes and readers stay consistent; many runs
//     committing at once, on their own threads, keep each its own result
//     when some of them are refused (group commit).
//   - List: order, metadata filters (Metadata.RunKey, Metadata.Topology and
//     Metadata.Durability included), Before, Limit, namespaces, invalid filter
//     keys, and LangGraph JS's cartesian product against a model.
//   - Namespaces (a subgraph's checkpoints, checkpoint.TaskNS): one lease
//     and one epoch for every namespace of a thread (another owner is
//     refused in any of them, a claim in one takes the thread, a release
//     from any frees it); a namespace's first Put next to the root's head;
//     Prune deleting the namespaces nested below the checkpoints it
//     deleted; Threads listing a thread once and counting its subgraphs'
//     writes as updates; the inbox listing root interrupts only;
//     DeleteThread removing nested namespaces.
//   - DeleteThread, Validation (malformed requests give ErrInvalid and write
//     nothing), Context (a cancelled write writes nothing) and Aliasing
//     (savers copy requests; returned tuples belong to the caller).
//   - Reopen, when Options.Reopen is set.
//   - Searcher (LangGraph's list(None, filter): every thread's
//     checkpoints newest first across threads, the root namespace by
//     default, filters, Before and Limit across threads as List's,
//     each result the tuple List returns, deleted threads gone),
//     ThreadLister, InterruptLister, Pruner, Vacuumer, ChainPutter
//     (a chain reads back as Puts one by one would, and is refused as a
//     whole, or as not a chain, writing nothing) and LeaseInspector (the
//     epoch counts the claims: 1 after a thread's first Put, one more each
//     time the lease passes to a new owner, unchanged by renewals and the
//     holder's saves; kept across a release and a reopen) and
//     TopologyStore (a topology reads back byte for byte under its
//     fingerprint, is stored once however often it is stored, with its
//     first and last store times; the newest of a name is the one stored
//     last, by order of the stores, a rollback included; refused stores
//     write nothing; topologies outlive DeleteThread and a reopen), when
//     the saver implements them (found by type assertion; skipped
//     otherwise).
//   - DueWork, for a saver implementing checkpoint.DueWork and
//     checkpoint.InputQueue: queued input oldest first and keyed once per
//     thread; a claim holds the thread under its lease and leaves it due
//     until settled, so a dead worker's claim is due again when its lease
//     lapses; Settle drops the applied input, runs the rest of the queue,
//     waits (DueLater), parks behind a head until it moves, hands back at
//     once (DueKeep), and is refused (ErrClaimLost) for a claim another
//     replaced; a runner's expired, unreleased lease is due, a live or
//     released one is not; claims race without sharing a thread; Next
//     is the wait until the next lease end or retry; all of it survives
//     a reopen.
//
// # Choices left to savers, and what is pinned
//
// Where the contract allows more than one answer, the suite accepts each:
//
//   - GetOptions.Have: a saver may ignore it, leave out channels held at
//     their version, or return only the blobs after the held version.
//   - A checkpoint whose channels cannot be rebuilt (an append base or a
//     version with no blob, an empty version) may be refused by Put with
//     ErrInvalid, or stored and reported by Get and List as a
//     *checkpoint.CorruptError naming thread and checkpoint.
//   - Prune may keep the checkpoints that hold blobs a kept checkpoint
//     needs, or delete them and keep only the blobs; the kept checkpoints
//     must read back exactly and the count must match what List lost.
//   - A refused request that is both stale and under another owner's lease
//     may fail with either a ConflictError or a BusyError; a fork of an
//     unknown parent with ErrConflict or ErrNotFound; a Put reusing an
//     existing ID with ErrConflict or ErrInvalid.
//
// Pinned exactly: ConflictError and BusyError fields (Until = the holder's
// last write or claim + TTL; Runner and SameRunner; Epoch in the
// LeaseInspector cases); LeaseInfo fields; pending writes keyed by (task, WriteIndex),
// special ones replacing write by write; a refused request writes nothing
// and takes no lease; ThreadInfo.UpdatedAt is the time of the thread's
// last Put (or PutWrites) in any namespace;
// PendingInterrupt.CreatedAt is the time its __interrupt__ write was
// saved, and the page holding the last interrupt returns an empty cursor;
// Prune of a missing thread deletes 0 without error; a write with a
// cancelled context fails with context.Canceled.
//
// The suite never compares error strings: it matches errors with errors.Is
// and errors.As, and compares JSON by value, so a saver may re-encode what
// it stores. [Materialize] and [Values] rebuild channel values from the
// blobs a saver returns and are exported for savers' own tests.
package checkpointtest
