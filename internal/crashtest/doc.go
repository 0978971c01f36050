// Package crashtest is the crash harness shared by lockstep's tests: named
// crash points through the engine, child processes that SIGKILL themselves
// at a chosen hit of a point (or are killed by the parent after a delay),
// what the children acknowledged, a witness of real side effects, and
// Jepsen-style checkers run on the files after every death
// (docs/reliability.md H2, H3, H5). It is test support: production code never
// imports it.
//
// # The parts
//
//   - [Point] and [Points]: where a process can die. The engine's points
//     are the names its hooks pass (the graph runner's, through a context
//     of internal/testhook: [AfterNode], [BeforeSave], [AfterSave];
//     sqlite.Config.Hook: [PutBegin],
//     [PutBeforeCommit], [PutAfterCommit], [WritesBegin],
//     [WritesBeforeCommit], [WritesAfterCommit]; postgres.Config.Hook: the
//     same points named "postgres." and the joint commits of joins, fenced
//     writes and leases, [PostgresPoints]); the scenario's points are
//     hit by the test's own code ([AfterToolEffect] in a tool body right
//     after its effect, [AfterDecision] after Inbox.Decide returned,
//     [AfterClaim] after ledger.ClaimMessageTx and before the message's
//     work).
//   - [Plan]: die at the n-th hit of a point, or after a delay, or not at
//     all; [PlanSpace] draws plans from a seeded *rand.Rand, so a seed
//     replays the same plans.
//   - [Hook]: counts hits per point and kills the process (SIGKILL, [Kill])
//     at the plan's hit, after reporting "KILL <point> <n>". Its Hit method
//     is what testhook.With and sqlite.Config.Hook take.
//   - [Reporter]: the child's protocol lines on standard output: "ACK
//     <thread> <checkpoint>" only after a save returned, "TASK-ACK <thread>
//     <task>" for a task whose finished writes were saved, "EFFECT-ACK
//     <key>" only after an effect's outcome was recorded, "DECIDED <approval>
//     <outcome>" after a decision was recorded, "HITS ..." and "DONE" at a
//     clean exit. [AckSaver] and [AckLedger] wrap a saver and a ledger so
//     that the engine's own saves and outcomes are acknowledged;
//     [AckJoiner] is AckSaver for a saver that is a checkpoint.Joiner,
//     whose wrapper still runs the graph's joins in the saver's
//     transactions.
//   - [Run] (parent side): re-executes the test binary with a [Spawn]'s
//     environment and plan ([EnvPlan], [EnvGen]; the child reads them with
//     [ChildFromEnv]), applies the plan's delay, and returns a [Result]: what
//     the child acknowledged ([Output], parsed by [ParseOutput]) and whether
//     it died by SIGKILL. Any other end is a [*ChildError] ([ErrChildFailed],
//     [ErrHung]).
//   - [Witness]: an O_APPEND file, one line per real side effect, synced
//     per line; [ReadWitness] reads it back as [Effect] values.
//   - [History]: what all the children of one scenario acknowledged, with
//     their generations.
//   - The checkers, each returning [Violations] (typed [*Violation] values
//     naming a [CheckName], matching [ErrViolation]): [VerifyIntegrity]
//     (PRAGMA integrity_check), [VerifyCheckpoints] (every acknowledged
//     checkpoint present and on its head's chain, no fork, every thread
//     done, waiting or pending, never failed, with Next, Tasks and
//     Interrupts consistent according to checkpoint.Inspect, the savers'
//     pending-interrupt rule and optionally the runtime's snapshot),
//     [VerifyEffects] (at most once per key and per logical operation,
//     exactly once when acknowledged), [VerifyDecisions] (at most one
//     acknowledged decision per approval, every acknowledged decision
//     stored as acknowledged), [VerifyReruns] (a task acknowledged as
//     finished never runs in a later process).
//
// # How a package's tests use it
//
// The test binary is its own child. Its TestMain dispatches on a role
// variable of the test's choosing before anything else:
//
//	func TestMain(m *testing.M) {
//		if os.Getenv("MYPKG_CHILD") != "" {
//			os.Exit(runChild())
//		}
//		goleak.VerifyTestMain(m)
//	}
//
// The child reads its plan, builds the engine with the hook and the
// acknowledging wrappers, and works; a plan's point kills it mid-way:
//
//	ch, _ := crashtest.ChildFromEnv()
//	rep := crashtest.NewReporter(os.Stdout)
//	hook := crashtest.NewHook(ch.Plan, rep, nil)
//	s, _ := sqlite.Open(path, sqlite.Config{Hook: hook.Hit})
//	r, _ := g.Compile(graph.WithSaver(crashtest.AckSaver(s, rep)))
//	ctx := testhook.With(ctx, hook.Hit) // every run is given ctx
//	... // work; tool bodies call hook.Hit(string(crashtest.AfterToolEffect)) after their effect
//	rep.Done()
//
// The parent loops: draw a plan, run a child, add its result to the
// history, reopen the files and run the checkers, and print the seed and
// the plan with any violation:
//
//	res, err := crashtest.Run(ctx, crashtest.Spawn{Env: []string{"MYPKG_CHILD=1"}, Plan: plan, Gen: gen})
//	hist.Add(res)
//	_, vs := crashtest.VerifyCheckpoints(ctx, saver, threads, hist.Checkpoints, crashtest.CheckpointOptions{})
//	vs = append(vs, crashtest.VerifyIntegrity(ctx, saver.DB())...)
//	if err := vs.Err(); err != nil { t.Fatalf("seed %d plan %s: %v", seed, plan, err) }
//
// Give each child a generation (Spawn.Gen) that grows, and a clock that
// runs ahead by more than every lease per generation (compressed time):
// a restarted process then takes over a dead one's leases at once, which
// keeps cycles short without touching what is checked (leases are for
// liveness; the checks are about safety).
//
// # What the system crash loop covers
//
// TestCrashLoop (internal/systemtest/crashloop) runs an order desk
// scenario (message claims, two parallel checks joined, an agent with a
// memoised read and gated, ledgered writes, a reviewer, the approval
// worker) in children killed at seeded random points: 400 cycles by
// default (a tenth under the race detector), 2,000 with LOCKSTEP_LONG=1.
// A failure prints its seed and plan; LOCKSTEP_SEED=<seed> replays the
// seed's plans, and LOCKSTEP_REPLAY=<kept directory> runs the failed cycle
// again from the files it started with (TestCrashLoopReplay). It maps to
// docs/reliability.md as follows:
//
//   - R01 (crash between a node and its checkpoint): plans at [AfterNode]
//     and [BeforeSave]; the checks: every acknowledged checkpoint is there,
//     each check node's contribution appears once in the final state, the
//     charge's witness count is exactly one.
//   - R02 (crash inside the checkpoint transaction): [PutBegin],
//     [PutBeforeCommit], [WritesBegin], [WritesBeforeCommit]; the checks:
//     integrity_check, every checkpoint readable (CRC-checked), no torn
//     step (the head's tasks consistent), no fork.
//   - R03 (crash after COMMIT before the acknowledgement): [PutAfterCommit],
//     [WritesAfterCommit], [AfterSave]; the checks: the checkpoint is there
//     and on the chain, and no task acknowledged as finished runs again
//     ([VerifyReruns]).
//   - R04 (randomised SIGKILL loop): delay plans, about 30% of the cycles;
//     a liveness floor of killed cycles and completed scenarios, and
//     a clean child after repeated kills must finish its scenario.
//   - R05 (parallel branch, partial completion): fraud and stock run in
//     parallel; a branch whose writes were saved while its sibling ran
//     (a TASK-ACK) never runs again after a crash.
//   - R06-style (seeded, reproducible crash simulation): every plan is a
//     function of the seed and the cycle; TestCrashLoopReproduces runs a
//     seed's plan twice and sees the same kill point.
//   - R15 (an interrupt survives a crash) and R16 (resume does not replay
//     earlier writes): threads wait on approvals across kills; the final
//     conversation equals the reference one message for message, the
//     second identical read is a memo hit (the memo is checkpointed with
//     the thread), and no write is doubled.
//   - R19 (several interrupts in one node): the first order's tool node
//     waits on two approvals at once, decided and resumed separately.
//   - R34 (crash between a tool's effect and the ledger): [AfterToolEffect];
//     the re-run carries the same idempotency key, the tool's reconcile
//     hook finds the charge downstream, and the witness counts it once
//     (per key and per order), exactly once when the outcome was
//     acknowledged.
//   - R37 (a decision survives a crash before the resume):
//     [AfterDecision]; every acknowledged decision is stored, at most one
//     per approval, the answer each thread received is the stored
//     decision, no thread waits on an approval marked resumed, and a
//     finished scenario leaves no decision unresumed.
//   - R44 (message-ID dedup): every child redelivers every message and some
//     twice; [AfterClaim] kills between the claim and the order row of one
//     transaction; each message's effect happens once, exactly once when
//     acknowledged.
//
// TestCrashLoopDetects is the loop's negative control: scenarios broken on
// purpose (a fresh idempotency key per call, acknowledgements before the
// save, no message claim, decisions acknowledged before they are recorded)
// must each fail the check that guards against them.
package crashtest
