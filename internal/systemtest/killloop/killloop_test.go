package killloop_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/examples/escalation/escalate"
	"github.com/lockstepgo/lockstep/examples/hotelbooking/booking"
	"github.com/lockstepgo/lockstep/examples/refund/refunds"
	"github.com/lockstepgo/lockstep/examples/support/helpdesk"
	"github.com/lockstepgo/lockstep/internal/canon"
	"github.com/lockstepgo/lockstep/internal/crashtest"
	"github.com/lockstepgo/lockstep/internal/systemtest"
	"github.com/lockstepgo/lockstep/internal/testhook"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

// The kill-and-rerun loop over the four examples: each
// scenario plays one example's main path in child processes (this test
// binary re-run with LOCKSTEP_CHILD=killLoopRole, calling the example's Run
// as its main does, with a context that SIGINT cancels), kills them with
// SIGKILL or interrupts them with SIGINT at seeded random moments (at the
// n-th hit of a graph hook point or of a point inside a write tool's body,
// or after a random delay), and reruns the program at once or after the
// leases, as a user would. A scripted careful reviewer decides what the
// story leaves to a human (the hotel booking above the price limit) and
// every outcome-unknown approval, after checking the downstream table.
// After every child: the file passes integrity_check and no side effect
// happened twice. At the end of every scenario: the threads and the
// downstream tables are those of an uninterrupted run, and after the last
// kill no wait was longer than two lease periods (klDeferBound).

// killLoopRole is the LOCKSTEP_CHILD role of the kill loop's children.
const killLoopRole = "examples-kill-loop"

// Environment of a kill-loop child.
const (
	envKLExample = "LOCKSTEP_KL_EXAMPLE"
	envKLMode    = "LOCKSTEP_KL_MODE"
	envKLDB      = "LOCKSTEP_KL_DB"
	envKLPlan    = "LOCKSTEP_KL_PLAN"
	envKLLease   = "LOCKSTEP_KL_LEASE"
)

// Exit codes of a kill-loop child: those of the examples' programs (0
// done, 1 failed, 130 interrupted), and two that name a transient
// refusal, so that the parent can tell them apart without reading text.
const (
	klExitDone        = 0
	klExitFailed      = 1
	klExitBusy        = 75 // checkpoint.ErrThreadBusy: another runner's lease
	klExitInProgress  = 76 // ledger.ErrInProgress: a call held by another run
	klExitInterrupted = 130
)

// Scale of the kill loop. LOCKSTEP_LONG=1 runs more scenarios;
// LOCKSTEP_KILL_SCENARIOS overrides the count, LOCKSTEP_SEED the seed,
// LOCKSTEP_KILL_EXAMPLE limits the loop to one example, and
// LOCKSTEP_KILL_SCENARIO=<i> runs scenario i alone (a finding names it).
const (
	klScenarios     = 8 // 2 per example: the default tier of go test ./..., some 20 s
	klLongScenarios = 200
	// klMaxKills is the most kills of one scenario; each scenario draws
	// its own number, from 1.
	klMaxKills = 4
	// klLease is every lease the examples take (the graph's, the approval
	// worker's): short, so that rerunning after the leases costs little.
	klLease = 600 * time.Millisecond
	// klMargin is added to a lease before rerunning "after the leases":
	// clock granularity, not scheduling (the holder is dead).
	klMargin = 100 * time.Millisecond
	// klTimeout bounds a child; a clean one takes well under a second.
	klTimeout = 2 * time.Minute
	// klMaxRuns bounds the children of one scenario after its kills.
	klMaxRuns = 12
	// klEscalationTimeout is create_issue's timeout in the escalation
	// example, its tracker answering 20% later (the example's ratio). The
	// example's 50 ms is too tight for a loaded machine: a retry that the
	// tracker answers at once can take longer there, and the fallback
	// runs in a story that should not need it.
	klEscalationTimeout = 250 * time.Millisecond
)

// Run modes of a child.
const (
	klModeRun    = "run"    // the program, as `go run ./examples/NAME`
	klModeResume = "resume" // hotelbooking --resume
)

// klExample is one example as the loop drives it.
type klExample struct {
	name    string
	threads []string
	// run plays the program once on db, as its main does; ctx carries the
	// child's test hook (internal/testhook), which the graph, the saver
	// and the write tools' bodies call.
	run func(ctx context.Context, mode, db string, lease time.Duration, out io.Writer) error
	// afterDecision is the mode of the runs after a human decided.
	afterDecision string
	// effects counts the downstream rows by logical operation.
	effects func(ctx context.Context, db *sql.DB) (map[string]int, error)
	// tables maps each write tool to its downstream table, which keeps
	// the call's idempotency key (for the careful reviewer).
	tables map[string]string
	// toolPoints are the points inside write tool bodies that an
	// uninterrupted run must pass.
	toolPoints []string
}

func klExamples() []*klExample {
	return []*klExample{
		{
			name:    "hotelbooking",
			threads: []string{booking.ThreadCompliance, booking.ThreadApproval},
			run: func(ctx context.Context, mode, db string, lease time.Duration, out io.Writer) error {
				_, err := booking.Run(ctx, booking.Config{DB: db, Out: out, Resume: mode == klModeResume, Lease: lease})
				return err
			},
			afterDecision: klModeResume,
			effects: func(ctx context.Context, db *sql.DB) (map[string]int, error) {
				return klCount(ctx, db, "hotel_bookings", "guest || ' at ' || hotel || ' from ' || check_in")
			},
			tables:     map[string]string{"book_hotel": "hotel_bookings"},
			toolPoints: []string{booking.HookBeforeBook, booking.HookAfterBook},
		},
		{
			name:    "support",
			threads: []string{helpdesk.Thread},
			run: func(ctx context.Context, mode, db string, lease time.Duration, out io.Writer) error {
				_, err := helpdesk.Run(ctx, helpdesk.Config{DB: db, Out: out, Lease: lease})
				return err
			},
			afterDecision: klModeRun,
			effects: func(ctx context.Context, db *sql.DB) (map[string]int, error) {
				return klCount(ctx, db, "helpdesk_closures", "'close ' || ticket_id")
			},
			tables:     map[string]string{"close_ticket": "helpdesk_closures"},
			toolPoints: []string{helpdesk.HookBeforeClose, helpdesk.HookAfterClose},
		},
		{
			name:    "refund",
			threads: []string{refunds.ThreadPaid, refunds.ThreadExpired},
			run: func(ctx context.Context, mode, db string, lease time.Duration, out io.Writer) error {
				_, err := refunds.Run(ctx, refunds.Config{DB: db, Out: out, Lease: lease})
				return err
			},
			afterDecision: klModeRun,
			effects: func(ctx context.Context, db *sql.DB) (map[string]int, error) {
				return klCount(ctx, db, "refund_payments", "'refund ' || order_id")
			},
			tables:     map[string]string{"issue_refund": "refund_payments"},
			toolPoints: []string{refunds.HookBeforeRefund, refunds.HookAfterRefund},
		},
		{
			name:    "escalation",
			threads: []string{escalate.ThreadSlow, escalate.ThreadOutage},
			run: func(ctx context.Context, mode, db string, lease time.Duration, out io.Writer) error {
				_, err := escalate.Run(ctx, escalate.Config{DB: db, Out: out, Lease: lease, Timeout: klEscalationTimeout, Latency: klEscalationTimeout * 6 / 5})
				return err
			},
			afterDecision: klModeRun,
			effects: func(ctx context.Context, db *sql.DB) (map[string]int, error) {
				issues, err := klCount(ctx, db, "tracker_issues", "'issue ' || title")
				if err != nil {
					return nil, err
				}
				queued, err := klCount(ctx, db, "escalation_outbox", "'queued ' || title")
				maps.Copy(issues, queued)
				return issues, err
			},
			tables:     map[string]string{"create_issue": "tracker_issues", "queue_escalation": "escalation_outbox"},
			toolPoints: []string{escalate.HookBeforeCreate, escalate.HookAfterCreate, escalate.HookBeforeQueue, escalate.HookAfterQueue},
		},
	}
}

// klCount returns the rows of table grouped by the SQL expression op (none
// when the table does not exist yet: the program was killed before it
// created it).
func klCount(ctx context.Context, db *sql.DB, table, op string) (map[string]int, error) {
	out := map[string]int{}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, table).Scan(&n); err != nil || n == 0 {
		return out, err
	}
	rows, err := db.QueryContext(ctx, `SELECT `+op+`, count(*) FROM `+table+` GROUP BY 1`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var c int
		if err := rows.Scan(&k, &c); err != nil {
			return nil, err
		}
		out[k] = c
	}
	return out, rows.Err()
}

// klPlan says how a child is stopped: at the N-th hit of Point (the child
// signals itself there) or after Delay (the parent signals it), with Sig
// (SIGKILL or SIGINT); the zero plan stops nothing.
type klPlan struct {
	Point string
	N     int
	Delay time.Duration
	Sig   syscall.Signal
}

func (p klPlan) String() string {
	sig := "KILL"
	if p.Sig == syscall.SIGINT {
		sig = "INT"
	}
	switch {
	case p.Point != "":
		return fmt.Sprintf("%s@%d/%s", p.Point, p.N, sig)
	case p.Delay > 0:
		return fmt.Sprintf("delay=%v/%s", p.Delay, sig)
	}
	return "none"
}

func parseKLPlan(s string) (klPlan, error) {
	if s == "" || s == "none" {
		return klPlan{}, nil
	}
	what, sig, ok := strings.Cut(s, "/")
	p := klPlan{Sig: syscall.SIGKILL}
	switch {
	case !ok:
		return klPlan{}, fmt.Errorf("kill loop plan %q: no signal", s)
	case sig == "INT":
		p.Sig = syscall.SIGINT
	case sig != "KILL":
		return klPlan{}, fmt.Errorf("kill loop plan %q: signal %q", s, sig)
	}
	if d, ok := strings.CutPrefix(what, "delay="); ok {
		var err error
		p.Delay, err = time.ParseDuration(d)
		return p, err
	}
	pt, n, ok := strings.Cut(what, "@")
	var err error
	p.Point = pt
	if p.N, err = strconv.Atoi(n); !ok || err != nil || p.N < 1 {
		return klPlan{}, fmt.Errorf("kill loop plan %q: want point@n", s)
	}
	return p, nil
}

// runKillLoopChild is a kill-loop child: the example's program, with the
// plan's hook. It prints "STOP <point> <n> <signal>" before it signals
// itself, and "HITS <point>=<n>..." when the program returned.
func runKillLoopChild() int {
	var ex *klExample
	for _, e := range klExamples() {
		if e.name == os.Getenv(envKLExample) {
			ex = e
		}
	}
	plan, err := parseKLPlan(os.Getenv(envKLPlan))
	lease, lerr := time.ParseDuration(os.Getenv(envKLLease))
	if ex == nil || err != nil || lerr != nil {
		fmt.Fprintf(os.Stderr, "kill loop child: example %q, plan: %v, lease: %v\n", os.Getenv(envKLExample), err, lerr)
		return 2
	}
	// As the examples' demo.Exec: the first SIGINT cancels the context and
	// restores the default, so that a second one kills the process.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	context.AfterFunc(ctx, stop)

	var (
		mu    sync.Mutex
		hits  = map[string]int{}
		fired bool
	)
	hook := func(point string) {
		mu.Lock()
		hits[point]++
		n := hits[point]
		fire := !fired && plan.Point == point && plan.N == n
		fired = fired || fire
		mu.Unlock()
		if !fire {
			return
		}
		fmt.Printf("STOP %s %d %s\n", point, n, plan)
		if plan.Sig == syscall.SIGKILL {
			crashtest.Kill()
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGINT) // delivered asynchronously, as a Ctrl-C
	}
	err = ex.run(testhook.With(ctx, hook), os.Getenv(envKLMode), os.Getenv(envKLDB), lease, os.Stdout)
	mu.Lock()
	keys := slices.Sorted(maps.Keys(hits))
	var b strings.Builder
	b.WriteString("HITS")
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%d", k, hits[k])
	}
	mu.Unlock()
	fmt.Println(b.String())
	switch {
	case err == nil:
		return klExitDone
	case ctx.Err() != nil:
		fmt.Fprintf(os.Stderr, "%s: interrupted (%v); run it again to continue where it stopped\n", ex.name, err)
		return klExitInterrupted
	case errors.Is(err, checkpoint.ErrThreadBusy):
		fmt.Fprintf(os.Stderr, "%s: busy: %v\n", ex.name, err)
		return klExitBusy
	case errors.Is(err, ledger.ErrInProgress):
		fmt.Fprintf(os.Stderr, "%s: in progress: %v\n", ex.name, err)
		return klExitInProgress
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", ex.name, err)
	return klExitFailed
}

// klResult is what became of a child.
type klResult struct {
	Plan klPlan
	Mode string
	// Code is the exit code, -1 when a signal ended the child (Signal).
	Code   int
	Signal syscall.Signal
	// Stopped is the child's STOP line: it reached its plan's point.
	Stopped    bool
	Hits       map[string]int
	Stdout     string
	Stderr     string
	Start, End time.Time
}

// stoppedBy names how the child was stopped ("" when it was not).
func (r *klResult) stoppedBy() string {
	switch {
	case r.Code == -1 && r.Signal == syscall.SIGKILL:
		return "SIGKILL"
	case r.Code == -1 && r.Signal == syscall.SIGINT:
		return "SIGINT" // before the program caught it: it died of it
	case r.Code == klExitInterrupted:
		return "SIGINT"
	case r.Stopped && r.Plan.Sig == syscall.SIGINT:
		return "SIGINT" // it finished all the same
	}
	return ""
}

// klSpawn runs one child and waits for it.
func klSpawn(ex *klExample, mode, db string, plan klPlan) (*klResult, error) {
	cmd := systemtest.Command(context.Background(), killLoopRole, envKLExample+"="+ex.name, envKLMode+"="+mode,
		envKLDB+"="+db, envKLLease+"="+klLease.String())
	child := plan
	child.Delay = 0
	if plan.Point == "" {
		child = klPlan{}
	}
	cmd.Env = append(cmd.Env, envKLPlan+"="+child.String())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	res := &klResult{Plan: plan, Mode: mode, Start: time.Now()}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var delay <-chan time.Time
	if plan.Delay > 0 {
		t := time.NewTimer(plan.Delay)
		defer t.Stop()
		delay = t.C
	}
	hang := time.NewTimer(klTimeout)
	defer hang.Stop()
	var err error
	for done := false; !done; {
		select {
		case err = <-waited:
			done = true
		case <-delay:
			_ = cmd.Process.Signal(plan.Sig)
			delay = nil
		case <-hang.C:
			_ = cmd.Process.Kill()
			<-waited
			return nil, fmt.Errorf("child (%s, plan %s) hung for %v\nstdout:\n%s\nstderr:\n%s", mode, plan, klTimeout, klTail(stdout.String()), klTail(stderr.String()))
		}
	}
	res.End = time.Now()
	res.Stdout, res.Stderr = stdout.String(), stderr.String()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.Code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.Code, res.Signal = -1, ws.Signal()
		}
	default:
		return nil, err
	}
	res.Hits = map[string]int{}
	for line := range strings.Lines(res.Stdout) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "STOP ") {
			res.Stopped = true
		}
		if rest, ok := strings.CutPrefix(line, "HITS"); ok {
			for _, f := range strings.Fields(rest) {
				k, v, _ := strings.Cut(f, "=")
				res.Hits[k], _ = strconv.Atoi(v)
			}
		}
	}
	return res, nil
}

// klTail is the end of a child's output, for failure messages.
func klTail(s string) string {
	const max = 3000
	if len(s) > max {
		return "…" + s[len(s)-max:]
	}
	return s
}

// klThread is a thread as the lockstep CLI reads it from the file.
type klThread struct {
	Status string // done, waiting, failed, pending; "" when not started
	Answer string // the last assistant message
	// Waits are the pending interrupts, with their approval requests.
	Waits []klWait
	// Error is the first failed task's error.
	Error string
}

type klWait struct {
	ID      string
	Request *approval.Request // nil for an interrupt that is not an approval
	Record  *approval.Record  // the decision, nil while undecided
}

// klFile is what the loop reads from a scenario's file.
type klFile struct {
	Threads map[string]klThread
	Effects map[string]int
	// Unresumed counts the decided approvals of the threads whose resume
	// has not finished.
	Unresumed int
}

// klRead opens the scenario's file as the CLI does (read: saver, approval
// store) and reads its threads and downstream tables.
func klRead(ctx context.Context, ex *klExample, db string) (*klFile, error) {
	s, err := sqlite.Open(db, sqlite.Config{})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if vs := crashtest.VerifyIntegrity(ctx, s.DB()); len(vs) > 0 {
		return nil, vs.Err()
	}
	store, err := approval.OpenSQLStore(ctx, s.DB(), nil)
	if err != nil {
		return nil, err
	}
	f := &klFile{Threads: map[string]klThread{}}
	for _, thread := range ex.threads {
		tp, err := s.Get(ctx, checkpoint.Ref{Thread: thread}, checkpoint.GetOptions{})
		if errors.Is(err, checkpoint.ErrNotFound) {
			f.Threads[thread] = klThread{}
			continue
		}
		if err != nil {
			return nil, err
		}
		in, err := checkpoint.Inspect(tp, true)
		if err != nil {
			return nil, err
		}
		th := klThread{Status: in.Status}
		var msgs []nodes.Message
		for k, v := range in.Values {
			if strings.EqualFold(k, "messages") {
				if err := json.Unmarshal(v, &msgs); err != nil {
					return nil, fmt.Errorf("thread %s: messages: %w", thread, err)
				}
			}
		}
		for i := len(msgs) - 1; i >= 0; i-- {
			if msgs[i].Role == nodes.RoleAssistant {
				th.Answer = msgs[i].Content
				break
			}
		}
		for _, t := range in.Tasks {
			if t.Error != nil && th.Error == "" {
				th.Error = t.Name + ": " + t.Error.Message
			}
		}
		for _, it := range in.Interrupts {
			w := klWait{ID: it.ID}
			if req, ok, err := approval.ParseRequest(it.Value); err == nil && ok {
				w.Request = &req
				rec, err := store.Get(ctx, it.ID)
				switch {
				case err == nil:
					w.Record = &rec
				case !errors.Is(err, approval.ErrNotFound):
					return nil, err
				}
			}
			th.Waits = append(th.Waits, w)
		}
		f.Threads[thread] = th
	}
	if f.Effects, err = ex.effects(ctx, s.DB()); err != nil {
		return nil, err
	}
	for _, thread := range ex.threads {
		var n int
		if err := s.DB().QueryRowContext(ctx, `SELECT count(*) FROM approval_decisions WHERE thread = ? AND resumed_at IS NULL`, thread).Scan(&n); err != nil {
			return nil, err
		}
		f.Unresumed += n
	}
	return f, nil
}

// klReviewer is the careful reviewer: the travel desk for the hotel
// booking that the story leaves to a human, and whoever is asked about an
// outcome-unknown write, which it checks against the downstream table.
const klReviewer = "kill-loop reviewer"

// klDecision is what the reviewer decided about one approval.
type klDecision struct {
	Kind    approval.Kind
	Rule    string
	Verdict string // "approved" or "rejected"
	Why     string
}

// klReview decides the undecided approvals of the scenario's threads, as
// `lockstep approve` and `lockstep reject` would. An approval whose
// request does not say why it was raised (no rule) is an error: an
// operator could not tell why the thread waits.
func klReview(ctx context.Context, ex *klExample, db string) ([]klDecision, error) {
	s, err := sqlite.Open(db, sqlite.Config{})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	store, err := approval.OpenSQLStore(ctx, s.DB(), nil)
	if err != nil {
		return nil, err
	}
	inbox := approval.NewInbox(s, store)
	var out []klDecision
	for _, thread := range ex.threads {
		page, err := inbox.List(ctx, approval.Filter{Thread: thread})
		if err != nil {
			return out, err
		}
		for _, it := range page.Items {
			req := it.Request
			if req.Rule == "" {
				return out, fmt.Errorf("approval %s on thread %s (%s %s) does not say why it was raised: no rule", it.ID, thread, req.Tool, req.Args)
			}
			d := klDecision{Kind: req.Kind, Rule: req.Rule, Verdict: "approved"}
			if req.Kind == approval.KindOutcomeUnknown {
				// Approve only after checking downstream that it did not
				// happen: the call then runs again with the same key.
				happened, table, err := klHappened(ctx, ex, s.DB(), thread, req)
				if err != nil {
					return out, err
				}
				if happened {
					// The service keeps the key and answers a repeat with
					// what it did the first time: running it again
					// reports that, and does nothing twice.
					d.Why = "checked " + table + ": done under this call's key; its service answers a repeat with it"
				} else {
					d.Why = "checked " + table + ": nothing under this call's key; run it again"
				}
			} else {
				d.Why = "the story leaves it to a human"
			}
			if _, err := inbox.Approve(ctx, it.ID, klReviewer, d.Why); err != nil {
				return out, err
			}
			out = append(out, d)
		}
	}
	return out, nil
}

// klHappened looks the call of an outcome-unknown request up in its
// downstream table by its idempotency key.
func klHappened(ctx context.Context, ex *klExample, db *sql.DB, thread string, req approval.Request) (bool, string, error) {
	table, ok := ex.tables[req.Tool]
	if !ok {
		return false, "", fmt.Errorf("outcome-unknown approval for tool %q, which has no downstream table here", req.Tool)
	}
	args, err := canon.JSON(req.Args)
	if err != nil {
		return false, table, err
	}
	key := nodes.IdempotencyKey(thread, req.Tool, args)
	var n int
	err = db.QueryRowContext(ctx, `SELECT count(*) FROM `+table+` WHERE idempotency_key = ?`, key).Scan(&n)
	return n > 0, table, err
}

// klStats are the loop's counts.
type klStats struct {
	scenarios, children int
	kills               map[string]int // by signal
	where               map[string]int // kills by place
	atOnce, afterLeases int
	busy                int
	effects             int
	ends                map[string]int
	decisions           map[string]int
	// twice counts scenarios where an effect happened twice (or where an
	// uninterrupted run does none); unended those that did not reach
	// their end otherwise (a thread stranded, failed or waiting wrongly,
	// an effect missing). Both must stay 0: every one is a finding.
	twice, unended int
	worstAfterKill time.Duration // from the last kill to the end
}

func newKLStats() *klStats {
	return &klStats{kills: map[string]int{}, where: map[string]int{}, ends: map[string]int{}, decisions: map[string]int{}}
}

// klFinding is a scenario that broke a rule.
type klFinding struct {
	Scenario string
	Index    int
	What     string
	Twice    bool // an effect happened twice (else: the scenario did not reach its end)
}

// klOnlyEnv is the LOCKSTEP_KILL_EXAMPLE setting that reproduces a run
// over examples.
func klOnlyEnv(examples []*klExample) string {
	if len(examples) == 1 {
		return " LOCKSTEP_KILL_EXAMPLE=" + examples[0].name
	}
	return ""
}

// klScenario is one scenario's run.
type klScenario struct {
	t      *testing.T
	seed   uint64
	index  int
	ex     *klExample
	db     string
	ref    *klReference
	rng    *rand.Rand
	stats  *klStats
	trace  []string
	last   *klResult
	failed *klFinding
}

// klReference is what an uninterrupted scenario of an example does.
type klReference struct {
	hits    map[string]map[string]int // mode → point → hits
	elapsed map[string]time.Duration  // mode → duration of its run
	end     *klFile
}

func (sc *klScenario) name() string {
	return fmt.Sprintf("%s #%d", sc.ex.name, sc.index)
}

func (sc *klScenario) fail(format string, args ...any) {
	if sc.failed != nil {
		return
	}
	what := fmt.Sprintf(format, args...)
	if sc.last != nil {
		what += fmt.Sprintf("\nlast child (%s, plan %s, exit %d %v):\nstdout:\n%s\nstderr:\n%s", sc.last.Mode, sc.last.Plan, sc.last.Code, sc.last.Signal, klTail(sc.last.Stdout), klTail(sc.last.Stderr))
	}
	what += "\nruns: " + strings.Join(sc.trace, " → ")
	sc.failed = &klFinding{Scenario: sc.name(), Index: sc.index, What: what}
}

// failTwice is fail for an effect that happened more than once.
func (sc *klScenario) failTwice(format string, args ...any) {
	sc.fail(format, args...)
	sc.failed.Twice = true
}

// draw draws a plan for a child in mode: a point of an uninterrupted run
// and an occurrence up to its hits (about half of the points are inside
// write tools' bodies when the mode has any), or a delay up to a bit more
// than the uninterrupted run took; SIGKILL or SIGINT alike.
func (sc *klScenario) draw(mode string) klPlan {
	p := klPlan{Sig: syscall.SIGKILL}
	if sc.rng.IntN(2) == 0 {
		p.Sig = syscall.SIGINT
	}
	hits := sc.ref.hits[mode]
	var tool, other []string
	for _, pt := range slices.Sorted(maps.Keys(hits)) {
		if strings.HasPrefix(pt, "tool:") {
			tool = append(tool, pt)
		} else {
			other = append(other, pt)
		}
	}
	r := sc.rng.Float64()
	switch {
	case r < 0.35 && len(tool) > 0:
		p.Point = tool[sc.rng.IntN(len(tool))]
	case r < 0.75 && len(other) > 0:
		p.Point = other[sc.rng.IntN(len(other))]
	default:
		el := max(sc.ref.elapsed[mode]*13/10, 20*time.Millisecond)
		p.Delay = time.Millisecond + time.Duration(sc.rng.Int64N(int64(el)))
		return p
	}
	p.N = 1 + sc.rng.IntN(hits[p.Point])
	return p
}

// atMostOnce checks the downstream tables after a child: no effect twice,
// none that an uninterrupted run does not have.
func (sc *klScenario) atMostOnce(f *klFile) bool {
	for op, n := range f.Effects {
		if n > 1 {
			sc.failTwice("%s happened %d times", op, n)
			return false
		}
		if sc.ref != nil && sc.ref.end != nil && sc.ref.end.Effects[op] == 0 {
			sc.failTwice("%s happened, and an uninterrupted run does not do it", op)
			return false
		}
	}
	return true
}

// describe says where the scenario's threads stand.
func (f *klFile) describe() string {
	var b strings.Builder
	for _, th := range slices.Sorted(maps.Keys(f.Threads)) {
		st := f.Threads[th]
		fmt.Fprintf(&b, "\n  %s: %q", th, st.Status)
		if st.Error != "" {
			fmt.Fprintf(&b, " (error %s)", st.Error)
		}
		for _, w := range st.Waits {
			switch {
			case w.Request == nil:
				fmt.Fprintf(&b, " waits on interrupt %s", w.ID)
			case w.Record == nil:
				fmt.Fprintf(&b, " waits on approval %s (%s, rule %s, kind %q), undecided", w.ID, w.Request.Tool, w.Request.Rule, w.Request.Kind)
			default:
				fmt.Fprintf(&b, " waits on approval %s (%s, rule %s), %s, resume %+v", w.ID, w.Request.Tool, w.Request.Rule, w.Record.Decision.Outcome, w.Record.Resume)
			}
		}
		if st.Answer != "" {
			fmt.Fprintf(&b, " answer %q", st.Answer)
		}
	}
	fmt.Fprintf(&b, "\n  effects %v", f.Effects)
	return b.String()
}

// play runs the scenario to its end, or to its first finding.
func (sc *klScenario) play(ctx context.Context, reference bool) {
	mode := klModeRun
	maxKills := 0
	if !reference {
		maxKills = 1 + sc.rng.IntN(klMaxKills)
	}
	kills, runs := 0, 0
	var lastKill time.Time
	human := false
	for {
		if runs++; runs > maxKills+klMaxRuns {
			sc.fail("no end after %d runs", runs-1)
			return
		}
		plan := klPlan{}
		if kills < maxKills && sc.rng.Float64() < 0.9 {
			plan = sc.draw(mode)
		}
		res, err := klSpawn(sc.ex, mode, sc.db, plan)
		if err != nil {
			sc.fail("%v", err)
			return
		}
		sc.last = res
		sc.stats.children++
		if reference {
			if sc.ref.hits[mode] == nil {
				sc.ref.hits[mode], sc.ref.elapsed[mode] = res.Hits, res.End.Sub(res.Start)
			}
		}
		f, err := klRead(ctx, sc.ex, sc.db)
		if err != nil {
			sc.fail("read the file after the child: %v", err)
			return
		}
		if !sc.atMostOnce(f) {
			return
		}
		step := fmt.Sprintf("%s[%s]", mode, plan)
		if by := res.stoppedBy(); by != "" {
			kills++
			sc.stats.kills[by]++
			lastKill = res.End
			switch {
			case !res.Stopped:
				sc.stats.where["after a random delay"]++
			case strings.HasPrefix(res.Plan.Point, "tool:"):
				sc.stats.where["inside a write tool's body"]++
			case strings.HasPrefix(res.Plan.Point, "sqlite."):
				sc.stats.where["inside the saver's transactions or set-up"]++
			default:
				sc.stats.where["at a graph step's points"]++
			}
			if f.Unresumed > 0 {
				sc.stats.where["with a decided approval not yet resumed (in the worker's pass, or before it)"]++
			}
			if sc.rng.IntN(2) == 0 {
				sc.stats.atOnce++
				step += " " + by + ", rerun at once"
			} else {
				sc.stats.afterLeases++
				step += " " + by + ", rerun after the leases"
				time.Sleep(klLease + klMargin)
			}
			sc.trace = append(sc.trace, step)
			continue
		}
		switch res.Code {
		case klExitDone:
		case klExitBusy:
			// Another runner's lease: only the killed process's, which
			// cannot outlive its lease.
			sc.stats.busy++
			sc.trace = append(sc.trace, step+" busy")
			if lastKill.IsZero() || res.Start.After(lastKill.Add(klLease+klMargin)) {
				sc.fail("the thread was busy %v after the last kill, whose leases last %v (no other process runs)", res.Start.Sub(lastKill), klLease)
				return
			}
			time.Sleep(time.Until(lastKill.Add(klLease + klMargin)))
			continue
		case klExitFailed:
			// A program may also say "come back later" as a failure (the
			// refund example, when a killed run still holds a thread
			// whose decision it must deliver): allowed within a lease of
			// the last kill, when the file shows a resume deferred to a
			// time within the bound checked below.
			if nb, ok := deferredUntil(f); ok && !lastKill.IsZero() && !res.Start.After(lastKill.Add(klLease+klMargin)) &&
				!nb.After(klDeferBound(lastKill, res.End)) {
				sc.stats.busy++
				sc.trace = append(sc.trace, step+" told to come back after the lease")
				time.Sleep(time.Until(nb) + klMargin)
				mode = sc.ex.afterDecision
				continue
			}
			sc.fail("the run failed (exit %d):%s", res.Code, f.describe())
			return
		case klExitInProgress:
			sc.fail("the ledger said a call is in progress elsewhere, and no other process runs:%s", f.describe())
			return
		default:
			sc.fail("the run failed (exit %d):%s", res.Code, f.describe())
			return
		}
		// A clean exit: the scenario is at its end, or waits on a human,
		// or on a resume the worker deferred; nothing else.
		sc.trace = append(sc.trace, step+" exit 0")
		var undecided, deferred int
		notBefore := time.Time{}
		for _, th := range sc.ex.threads {
			st := f.Threads[th]
			switch st.Status {
			case "done":
				continue
			case "waiting":
			default:
				sc.fail("the program exited 0 and left thread %s %q:%s", th, st.Status, f.describe())
				return
			}
			for _, w := range st.Waits {
				switch {
				case w.Request == nil:
					sc.fail("the program exited 0 and left thread %s waiting on interrupt %s, which is not an approval:%s", th, w.ID, f.describe())
					return
				case w.Record == nil:
					undecided++
				case w.Record.Resume.At.IsZero() && res.Mode == sc.ex.afterDecision && w.Record.Resume.NotBefore.Before(res.Start):
					sc.fail("the program exited 0 and did not resume thread %s with decided approval %s, due when it started:%s", th, w.ID, f.describe())
					return
				case w.Record.Resume.At.IsZero():
					deferred++
					if w.Record.Resume.NotBefore.After(notBefore) {
						notBefore = w.Record.Resume.NotBefore
					}
				default:
					sc.fail("thread %s waits on approval %s, which is marked resumed (%s):%s", th, w.ID, w.Record.Resume.Note, f.describe())
					return
				}
			}
		}
		switch {
		case undecided > 0:
			ds, err := klReview(ctx, sc.ex, sc.db)
			if err != nil {
				sc.fail("the reviewer: %v:%s", err, f.describe())
				return
			}
			if len(ds) == 0 {
				sc.fail("%d approval(s) wait undecided, and the inbox lists none:%s", undecided, f.describe())
				return
			}
			for _, d := range ds {
				sc.stats.decisions[fmt.Sprintf("%s (rule %s) %s", klKind(d.Kind), d.Rule, d.Verdict)]++
				sc.trace = append(sc.trace, fmt.Sprintf("reviewer %s %s: %s", d.Verdict, klKind(d.Kind), d.Why))
				if d.Kind == approval.KindOutcomeUnknown {
					human = true
				}
			}
			mode = sc.ex.afterDecision
			continue
		case deferred > 0:
			// The worker left the resume for later: a claim of a killed
			// worker, or a backoff. It must not take longer than two lease
			// periods after the last kill (see klDeferBound).
			if lastKill.IsZero() || notBefore.After(klDeferBound(lastKill, res.End)) {
				sc.fail("the program exited 0 with %d decided approval(s) left for later, until %v after the last kill and %v after the run that left them ended (leases last %v):%s",
					deferred, klSince(notBefore, lastKill), klSince(notBefore, res.End), klLease, f.describe())
				return
			}
			sc.trace = append(sc.trace, "wait for the deferred resume")
			time.Sleep(time.Until(notBefore) + klMargin)
			mode = sc.ex.afterDecision
			continue
		}
		// Every thread is done: the end of an uninterrupted run.
		if !reference {
			if !sc.sameEnd(f) {
				return
			}
			if !lastKill.IsZero() {
				sc.stats.worstAfterKill = max(sc.stats.worstAfterKill, res.End.Sub(lastKill))
			}
			end := "done"
			if human {
				end = "done after an outcome-unknown approval"
			}
			sc.stats.ends[end]++
			for _, n := range f.Effects {
				sc.stats.effects += n
			}
		} else {
			sc.ref.end = f
		}
		return
	}
}

// sameEnd compares the end of a scenario with that of an uninterrupted
// run: every thread done with the same last answer, the same effects.
func (sc *klScenario) sameEnd(f *klFile) bool {
	var diffs []string
	for _, th := range sc.ex.threads {
		got, want := f.Threads[th], sc.ref.end.Threads[th]
		if got.Status != want.Status || got.Answer != want.Answer {
			diffs = append(diffs, fmt.Sprintf("thread %s: %s %q, want %s %q", th, got.Status, got.Answer, want.Status, want.Answer))
		}
	}
	for _, op := range slices.Sorted(maps.Keys(sc.ref.end.Effects)) {
		if f.Effects[op] != sc.ref.end.Effects[op] {
			diffs = append(diffs, fmt.Sprintf("%s: %d time(s), want %d", op, f.Effects[op], sc.ref.end.Effects[op]))
		}
	}
	if len(diffs) > 0 {
		sc.fail("the scenario ended unlike an uninterrupted run:\n  %s%s", strings.Join(diffs, "\n  "), f.describe())
		return false
	}
	return true
}

// deferredUntil returns the latest time a decided approval's resume was
// deferred to, and whether there is one.
func deferredUntil(f *klFile) (time.Time, bool) {
	var nb time.Time
	found := false
	for _, th := range f.Threads {
		for _, w := range th.Waits {
			if w.Record != nil && w.Record.Resume.At.IsZero() {
				found = true
				if w.Record.Resume.NotBefore.After(nb) {
					nb = w.Record.Resume.NotBefore
				}
			}
		}
	}
	return nb, found
}

func klKind(k approval.Kind) string {
	if k == "" {
		return string(approval.KindGate)
	}
	return string(k)
}

// klDeferBound is the latest a resume may be deferred to by a run that
// ended at end, the last kill at lastKill: a lease after the later of the
// killed process's lease (it cannot be renewed after lastKill) and the
// deferring write (before end). On a quiet machine that is two lease
// periods after the last kill. It is causal, not a timing: a child that a
// loaded machine starts late defers from when it runs, and a wait longer
// than a lease (a clock moved hours ahead, a backoff unrelated to the
// lease) still fails it by far.
func klDeferBound(lastKill, end time.Time) time.Time {
	from := lastKill.Add(klLease)
	if end.After(from) {
		from = end
	}
	return from.Add(klLease + klMargin)
}

func klSince(t, since time.Time) time.Duration { return t.Sub(since).Round(time.Millisecond) }

// TestExamplesKillLoop is the kill-and-rerun loop over the four examples
// (see the top of this file). Each example is first played uninterrupted
// (its reference: which points it passes, how long it takes, where it
// ends); then klScenarios scenarios, the examples in turn, each on a new
// file, with up to klMaxKills kills. Every plan is a function of the seed,
// the scenario and the run, so LOCKSTEP_SEED replays them (the timing of
// delay plans aside).
func TestExamplesKillLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("the kill loop runs the examples in child processes")
	}
	seed := systemtest.Seed(t, "LOCKSTEP_SEED")
	n := klScenarios
	if os.Getenv("LOCKSTEP_LONG") == "1" {
		n = klLongScenarios
	}
	if s := os.Getenv("LOCKSTEP_KILL_SCENARIOS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("LOCKSTEP_KILL_SCENARIOS=%q", s)
		}
	}
	examples := klExamples()
	if only := os.Getenv("LOCKSTEP_KILL_EXAMPLE"); only != "" {
		examples = slices.DeleteFunc(examples, func(e *klExample) bool { return e.name != only })
		if len(examples) == 0 {
			t.Fatalf("LOCKSTEP_KILL_EXAMPLE=%q names no example", only)
		}
	}
	t.Logf("kill loop seed %d: %d scenarios, leases %v; reproduce: LOCKSTEP_SEED=%d go test -run '^TestExamplesKillLoop$' ./internal/systemtest/killloop", seed, n, klLease, seed)
	ctx := context.Background()
	dir := t.TempDir()
	stats := newKLStats()
	refs := map[string]*klReference{}
	for _, ex := range examples {
		ref := &klReference{hits: map[string]map[string]int{}, elapsed: map[string]time.Duration{}}
		sc := &klScenario{t: t, seed: seed, ex: ex, db: filepath.Join(dir, ex.name+"-reference.db"), ref: ref, rng: rand.New(rand.NewPCG(seed, 0)), stats: newKLStats()}
		sc.play(ctx, true)
		if sc.failed != nil {
			t.Fatalf("%s, uninterrupted: %s", ex.name, sc.failed.What)
		}
		for _, pt := range append(slices.Clone(ex.toolPoints), testhook.GraphAfterTask, "sqlite.put.begin") {
			passed := false
			for _, hits := range ref.hits {
				passed = passed || hits[pt] > 0
			}
			if !passed {
				t.Fatalf("%s: an uninterrupted run never passes %s; its hits: %v", ex.name, pt, ref.hits)
			}
		}
		for op, c := range ref.end.Effects {
			if c != 1 {
				t.Fatalf("%s, uninterrupted: %s happened %d times", ex.name, op, c)
			}
		}
		refs[ex.name] = ref
	}
	only := -1
	if s := os.Getenv("LOCKSTEP_KILL_SCENARIO"); s != "" {
		var err error
		if only, err = strconv.Atoi(s); err != nil || only < 0 || only >= n {
			t.Fatalf("LOCKSTEP_KILL_SCENARIO=%q: want a scenario number under %d", s, n)
		}
	}
	var findings []klFinding
	start := time.Now()
	for i := range n {
		if only >= 0 && i != only {
			continue
		}
		ex := examples[i%len(examples)]
		sc := &klScenario{t: t, seed: seed, index: i, ex: ex, db: filepath.Join(dir, fmt.Sprintf("scenario-%d-%s.db", i, ex.name)),
			ref: refs[ex.name], rng: rand.New(rand.NewPCG(seed, uint64(i)+1)), stats: stats}
		sc.play(ctx, false)
		stats.scenarios++
		if sc.failed != nil {
			findings = append(findings, *sc.failed)
			stats.ends["failed"]++
			if sc.failed.Twice {
				stats.twice++
			} else {
				stats.unended++
			}
		}
	}
	t.Logf("kill loop seed %d: %d scenarios in %v, %d children; kills %v (%v); reruns at once %d, after the leases %d; busy reruns %d; effects %d at the ends; ran twice %d, did not reach their end %d; scenarios ended %v; reviewer %v; longest from the last kill to the end %v",
		seed, stats.scenarios, time.Since(start).Round(time.Millisecond), stats.children, stats.kills, stats.where, stats.atOnce, stats.afterLeases, stats.busy, stats.effects, stats.twice, stats.unended, stats.ends, stats.decisions, stats.worstAfterKill.Round(time.Millisecond))
	for _, f := range findings {
		t.Errorf("kill loop seed %d, scenario %s: %s\nreproduce: LOCKSTEP_SEED=%d LOCKSTEP_KILL_SCENARIOS=%d LOCKSTEP_KILL_SCENARIO=%d%s go test -run '^TestExamplesKillLoop$' ./internal/systemtest/killloop",
			seed, f.Scenario, f.What, seed, n, f.Index, klOnlyEnv(examples))
	}
}
