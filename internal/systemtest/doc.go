// Package systemtest is the harness of lockstep's system tests: the
// scenarios that run across packages, in real processes, on real files
// (crash and kill loops, the soak, bad inputs, golden files, fencing,
// leaks, freezes, races). It is test support: only tests import it, and
// production code never does.
//
// The tests live in the packages below it, one per area, each named for
// what it checks:
//
//   - crash: SIGKILL at chosen points of one run (an interrupt saved, a
//     resumed node before its checkpoint, a commit before its
//     acknowledgement, a subgraph's boundary), the parallel-branch
//     ordering of R05, and each commit point of the Postgres saver
//     (approvals consumed and ledger outcomes committed with their saves).
//   - crashloop: the seeded crash loop over an order desk (R01-R06, R15,
//     R16, R19, R34, R37, R44) and its negative controls.
//   - killloop: the examples' programs killed and restarted as a user
//     runs them.
//   - soak: processes and goroutines on one file under injected faults,
//     a nemesis and redelivered messages (R52).
//   - badinput: corrupt, oversized and hostile inputs get typed errors and
//     lose nothing.
//   - golden: files written by an earlier lockstep resume the same.
//   - fence: a stale writer is fenced, on SQLite and Postgres.
//   - freeze: a runner frozen past its lease is refused when it thaws.
//   - leak: no descriptor, connection or goroutine outlives a Close.
//   - race: concurrent resumes keep every answer.
//   - status, runkey: the status table, run metadata and run keys on
//     every saver.
//   - docs: what the documents tell a user to run.
//
// What they share is here, one copy each:
//
//   - child processes: a test re-runs its own binary in a role
//     ([Command], or crashtest.Run for a crash plan); the package's
//     TestMain hands the role to [RunChild] before it runs any test, and
//     a crash child reads its plan and configuration with [ChildConfig];
//   - the soak's payments application ([OpenSoakApp]) that the soak, the
//     bad-input and the leak tests open, its injected faults
//     ([SoakFaults], on [FaultDrivers]) and side files ([OpenSideFile]);
//   - the savers every end-to-end test runs on ([EverySaver]);
//   - seeds that a failure prints and an environment variable replays
//     ([Seed]), the clock of a crash child's generation ([Clock],
//     [GenerationSkew]), how a child's run ended ([EndClass]), the
//     checkpoint checker's view of a snapshot ([Snapshots]) and the
//     module's root for tests that read its files ([ModuleRoot]).
//
// Each package's main_test.go runs goleak.VerifyTestMain, as every
// package of the module does.
//
// The areas' tests are external test packages (package crash_test,
// soak_test, ...), as the root's lockstep_test is: the engine runs the
// JSON and text methods of types declared in lockstep's own non-test
// packages without containment (internal/safe trusts them), so a test
// type that stands for application code (a MarshalJSON that blocks or
// panics) must be declared in a _test package to be treated as a
// user's. For the same reason this package declares no type with such
// methods.
package systemtest
