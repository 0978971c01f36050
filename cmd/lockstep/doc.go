// Command lockstep inspects the paused work in a lockstep database and
// records approval decisions. Operators use it to see which threads are
// done, waiting, failed or pending and why; reviewers use it to list the
// pending approvals of all threads and to approve, edit or reject them.
//
// It works on any lockstep database without the application's graph code:
// states and statuses are read from the stored checkpoints with
// checkpoint.Inspect, approvals with approval.Inbox, and graphs from the
// topologies the graphs stored in the database (graph.Topology: every
// checkpoint names the one it was saved under).
//
// Usage:
//
//	lockstep [--db PATH] [--json] COMMAND [ARGS]
//
// --db names the SQLite file (default ./lockstep.db), or a PostgreSQL
// database by its URL (postgres://USER@HOST:PORT/DATABASE or
// postgresql://...), whose lockstep tables are in the schema named by the
// environment variable LOCKSTEP_POSTGRES_SCHEMA (default lockstep, as
// postgres.Config.Schema). lockstep never creates or migrates either: a
// missing, empty or non-SQLite file, or a schema without lockstep's
// tables, is an error that says what to do. Messages name a URL without
// its password. --json prints one JSON document (stable field names, times
// in RFC 3339 UTC) instead of a table. Both global flags may also follow
// the command, and a command's flags may follow its arguments.
//
// # Commands
//
//	lockstep threads [--limit N] [--cursor C]
//
// Lists threads, most recently updated first: thread, status (done,
// waiting, failed or pending), step, next tasks, head checkpoint and the
// age of the last update. It pages as every listing does (see Listings).
//
//	THREAD    STATUS   STEP  NEXT     HEAD                                  UPDATED
//	deploy-1  waiting  1     deploy   019cadf4-6140-7e32-8b80-3fc3cd0be08e  3m12s ago
//	import-9  failed   1     import   019cade2-11c0-7eb5-b34b-c0e7a77c0fa5  3m12s ago
//	refund-7  waiting  1     execute  019cadcf-c240-741c-b58e-420e99b86efc  3m13s ago
//
//	lockstep state THREAD [--checkpoint ID]
//
// Shows a thread at its head (or at an older checkpoint): status, the
// durability mode of the run that wrote the checkpoint (sync, async or
// exit, graph.WithDurability; unknown for a checkpoint written before
// lockstep recorded it), next tasks, the lease at the head (the run holding the thread and until when,
// or that its lease lapsed: a run that was killed keeps the thread until
// then), each task with its interrupts (ID and value preview; approval
// requests with tool, arguments, owner, the rule that raised them and
// expiry, or their decision and, when a worker claimed the resume and did
// not finish it or an attempt failed, until when and why) or its error,
// the breakpoint that holds it if any, the graph it was saved under (its
// name and fingerprint), the state values as JSON, and what to do next in
// one line. An approval of kind outcome_unknown (an earlier
// attempt of the write may already have taken effect) says so and what to
// check, instead of the model's rationale, which was written before it.
//
//	thread      refund-7
//	status      waiting
//	checkpoint  019cadcf-c240-741c-b58e-420e99b86efc (head)
//	step        1 (loop), created 2026-03-02T09:10:00Z, 50m00s ago
//	durability  sync (each step's checkpoint committed before the next step ran)
//	next        execute
//	lease       none (no run holds the thread)
//	graph       "main.Call" 9e75ebcacc00d361bf20ca71bac629e3 (the newest version stored)
//
//	TASK       NODE     STATUS   DETAIL
//	499def6f…  execute  waiting  approval 550f87fc…: refund {"amount":40,"order":"A-7"} for payments (rule risk:high) (expires in 10m00s)
//
//	values
//	{ … }
//
//	next step: waiting for approval 550f87fc…: run `lockstep approve 550f87fc… --reviewer NAME` or `lockstep reject …`
//
// A task that runs a subgraph (graph.AddSubgraph) and has not finished is
// followed by the subgraph's state, read from the head of the task's
// namespace: its namespace, status, checkpoint, step, next tasks and its
// own tasks, and so on down to the node that waits (--json: the task's
// "subgraph", at every depth).
//
//	subgraph importer (task c2062670…), namespace importer:c2062670-0ea0-28d1-bd00-c2adbcf132ce
//	  status      waiting
//	  …
//	  TASK       NODE    STATUS   DETAIL
//	  e04e6ead…  verify  waiting  interrupt ecc86106…: "import s3?"
//
// When a thread that will run again (waiting, failed or pending) was saved
// under another version of its graph than the newest one stored, state
// warns and says what changed: nodes, edges and breakpoints added and
// removed, and whether a node the thread waits in is gone. This is what
// to check before a deploy resumes threads that wait. The newest version
// of a graph is the topology of the same name (graph.WithName; the state
// type by default) that a graph stored last: every compiled graph stores
// its topology before its first write to the database (or when the
// application calls Runnable.SaveTopology at start-up), so the newest
// one is that of the process that started last, a rollback included.
//
//	graph       "deploy" ae2d160cad42c98cb5cc790a719c5609, not the newest version stored (b250401a…, stored 2026-03-02T09:55:00Z)
//
//	warning: this thread was saved under another version of graph "deploy" than the newest one stored
//	  (b250401a…, stored 2026-03-02T09:55:00Z): the process that runs it next runs that version. What changed:
//	  nodes added          verify
//	  edges added          deploy --> verify; verify --> __end__
//	  edges removed        deploy --> __end__
//
//	lockstep history THREAD [--limit N] [--before ID | --cursor C] [--values]
//
// Lists a thread's checkpoints, newest first: ID, step, source, the
// durability mode that wrote it (MODE; --json: "durability"), the tasks
// of the step that followed, and creation time; with --values, the state
// at each. A checkpoint that waits in a subgraph names the path down to
// the waiting node after its next tasks ("importer (waiting in importer >
// verify > check)"; --json: "waiting"). It pages as every listing does (see Listings); its cursor is a
// checkpoint ID, so --before ID (one of the thread's checkpoints) is the
// same as --cursor ID and continues with older ones.
//
//	lockstep approvals [--tool T] [--owner O] [--thread T] [--older-than D] [--expiring-within D] [--limit N] [--cursor C]
//
// Lists the pending approval requests of all threads, oldest first: ID,
// tool, thread, arguments, the rule that raised it, rationale, risk,
// owner, age and time to expiry. For a request of kind outcome_unknown
// the rationale says that the write may already have happened and what to
// check (approval.OutcomeUnknownNote; the model's own is model_rationale
// in JSON).
// Expired requests are not listed: they can no longer be approved, and
// seeing one expired records its expiry, a rejection by system:expiry,
// when the database has approval tables and is writable to the user (the
// line below the table counts them; expired and expiry_recorded in JSON).
// Durations are Go durations or days (90s,
// 30m, 2h, 1d). It pages as every listing does (see Listings); a cursor is
// only meaningful with the filters that printed it.
//
//	lockstep approve ID --reviewer NAME [--note TEXT] [--args JSON]
//	lockstep reject ID --reviewer NAME [--note TEXT]
//
// Record a decision on a pending approval with approval.Inbox: the
// reviewer's name, the note (which reaches the model), and for an edit
// (approve --args) the arguments to run instead, validated against the
// JSON Schema stored in the request. The first decision wins: a later one
// is refused with exit code 4 and told who won and what they decided.
// Refused decisions write nothing, except that a decision that arrives
// after the request expired records the expiry (exit code 4, kind
// expired), so that no later one, even with a clock stepped back, can
// approve it. These commands do not resume the
// thread: a process running approval.Worker with the graph
// (approval.ResumeGraph) resumes it with the recorded decision.
//
//	approval 550f87fc… approved by alice at 2026-03-02T10:00:00Z (tool refund, thread refund-7)
//	note: lost parcels are refunded
//	next step: thread "refund-7" is not resumed by this command: a process running approval.Worker …
//
//	lockstep serve [--addr HOST:PORT] [--reviewer NAME]
//
// Serves the reviewers' web inbox (package approval/reviewweb) on the
// database until Ctrl-C: the pending approvals of all threads, each with
// its arguments, rationale, context, time left, the thread's history and
// graph, and a form to approve, edit or reject it; a JSON API and live
// updates. It prints the URL and a one-time login token that signs one
// browser in as --reviewer (default: the user's name). Decisions are the
// approval package's first-wins transition, as for approve and reject,
// and like them they do not resume the thread. --addr defaults to
// 127.0.0.1:8080; keep it on loopback.
//
//	lockstep approvals for ./lockstep.db on http://127.0.0.1:8080
//	open http://127.0.0.1:8080/login?token=…
//
//	lockstep graph THREAD [--checkpoint ID]
//
// Prints the Mermaid flowchart of the graph the thread's head (or an older
// checkpoint) was saved under, exactly as the application's
// Runnable.Mermaid draws it, from the topology stored in the database, so
// it draws any application's graph; the nodes the thread waits in are
// marked with the class "waiting". --json adds the thread, checkpoint,
// graph name, fingerprint, waiting nodes, the stored topology and the
// newest version stored. A checkpoint that names no graph (written before
// lockstep recorded them) or whose topology the database does not hold
// (one an older lockstep wrote has none) is refused with exit code 3,
// saying which.
//
//	lockstep version
//
// Prints what the go command stamped into the binary
// (runtime/debug.ReadBuildInfo): the module and its version (a release
// such as v0.1.0 for `go install ...@v0.1.0`, a pseudo-version for a
// build at a commit, "(devel)" without VCS information), the VCS revision
// and commit time it was built from and whether the checkout had
// uncommitted changes (go build in a git clone records them; go install
// ...@VERSION does not, and they print as unknown), and the Go version
// and platform. It does not read the database.
//
//	lockstep  v0.1.0
//	module    github.com/lockstepgo/lockstep
//	revision  unknown (not built in a checkout)
//	time      unknown
//	go        go1.25.3
//	platform  linux/amd64
//
//	lockstep help [COMMAND]
//
// Prints the usage, or a command's flags.
//
// # Listings
//
// threads, history and approvals page alike. --limit N shows at most N
// entries (50 by default) and --limit 0 shows all of them; a negative
// limit is a usage error. A listing cut short says so below its table,
// with the command that shows the next page, and in JSON has "more": true
// and "next_cursor", which --cursor takes back (with the same filters and
// arguments) to continue after the last entry shown; "more" is false and
// "next_cursor" empty on the last page. A cursor continues after the
// entry it names, as it stood when its page was listed: what changed
// since (a thread updated since moves to the top of a new listing) is not
// listed twice, and nothing that stayed is skipped. A cursor no listing
// printed is a usage error.
//
// # Exit codes
//
//	0  ok
//	1  internal or database error (no database file at --db, unreadable data)
//	2  usage error: unknown command, bad flags or arguments, malformed --args JSON
//	3  not found: unknown thread, checkpoint or approval, or no stored graph to draw
//	4  refused: already decided, expired, invalid decision or edited arguments
//
// A failure prints one line on stderr, "lockstep: what went wrong: what to
// do". With --json it also prints a JSON document on stdout:
// {"error": {"exit_code", "kind", "message", "hint", "winner", "problems"}},
// where kind is usage, no_database, read_only, not_found, already_decided,
// expired, invalid_decision, invalid_args, invalid_request, corrupt or
// internal; winner is the decision that won when kind is already_decided,
// and problems, when kind is invalid_args because edited arguments fail the
// tool's schema, lists every problem as {"path", "reason"} (the message
// names them all too). corrupt
// (exit code 1) says that a stored row (a checkpoint, an approval decision,
// a ledger record) does not verify: its checksum does not match its key and
// contents, or it holds what lockstep never writes; the message names the
// thread and checkpoint, or the approval, and nothing was written.
//
// # Safety
//
// Reading commands change nothing in the database (they do not even create
// the approval tables), with one exception: an approval request that
// approvals or state sees expired has its expiry recorded, as any reader
// of the approval package records it, when the approval tables exist and
// the user may write the file. No command creates, migrates or adds tables to a
// file that is not already a lockstep database of this version: a --db
// that names another program's database, or one an older lockstep wrote
// whose tables this version cannot read as they are, is refused and left
// as it was. A database of the version before stored topologies (schema
// 4) reads as it is: it stores no graphs, and state and graph say so. Values are printed as stored; the runtime never
// stores secrets. Tables escape control characters and invisible
// direction marks in stored text, so that text a model wrote cannot drive
// the terminal; JSON output escapes them too.
//
// # Read-only access
//
// A user who may read but not write the database file can run the reading
// commands while its -wal and -shm files exist and are readable (whenever
// the program that writes it has it open, or after that program crashed):
// SQLite reads a WAL database through them without writing anything and
// sees the latest commit. When they do not exist, SQLite would have to
// create them, which a read-only directory forbids and which, in a
// writable one, leaves files that the writing program cannot use; lockstep
// refuses instead (kind read_only) and says so. approve and reject need
// write access and are refused (kind read_only) before anything is
// recorded.
package main
