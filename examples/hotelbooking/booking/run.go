package booking

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/examples/internal/demo"
	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/testhook"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
	"github.com/lockstepgo/lockstep/nodes/scripted"
	"github.com/lockstepgo/lockstep/observe"
)

// The threads of the two stories. Every thread of this example starts
// with ThreadPrefix; its approval worker resumes only those.
const (
	ThreadCompliance = "hotel-lisbon-robert"
	ThreadApproval   = "hotel-porto-ana"
	ThreadPrefix     = "hotel-"
)

// Reviewer is the compliance officer the program plays.
const Reviewer = "Priya Raman (compliance)"

// DefaultDB is the database file the program uses by default, the same as
// the lockstep CLI's.
const DefaultDB = "./lockstep.db"

// Config configures Run.
type Config struct {
	// DB is the SQLite file (created if missing).
	DB string
	// Out receives the narrative (nil: discarded).
	Out io.Writer
	// Resume runs only the approval worker: it resumes this example's
	// threads whose approvals were decided (lockstep approve/reject).
	Resume bool
	// Now is the clock of approval requests, decisions and bookings (nil:
	// time.Now).
	Now func() time.Time
	// Observer, if set, observes the graph, its model and tools, the
	// inbox and the approval worker (package observe; an OpenTelemetry
	// adapter is observe/otelobserve).
	Observer observe.Hook
	// Lease is how long a process that died keeps its claim on a thread
	// (the graph's lease) and on an approval it was resuming (the
	// worker's), before another process may take over. Zero means the
	// defaults (graph.DefaultLeaseTTL, and a minute). Crash tests shorten
	// it; the worker then tries a failed resume again after half of it
	// (demo.WorkerOptions).
	Lease time.Duration
}

// Counts is what a run did. Bookings is read from the hotel_bookings
// table, so it counts every run in every process; the others count this
// run only.
type Counts struct {
	Bookings int // rows in hotel_bookings after the run
	Booked   int // bookings this run created (book_hotel bodies that booked)
	Quotes   int // quotes this run asked for
	Holds    int // requests the compliance node held in this run
	Reviewed int // held requests a reviewer corrected in this run
	Resumed  int // threads the approval worker resumed in this run
}

// The requests of the two stories.
func heldRequest() Request {
	return Request{Guest: "Robert'); DROP TABLE bookings;--", Hotel: "Hotel Ritz", City: "Lisbon", CheckIn: "2026-05-04", Nights: 2}
}

// correctedGuest is the name the reviewer finds on the guest's passport.
const correctedGuest = "Robert Tables"

func gatedRequest() Request {
	return Request{Guest: "Ana Lima", Hotel: "Palácio Suites", City: "Porto", CheckIn: "2026-06-10", Nights: 4}
}

// expectUser is a scripted Expect that the conversation's first user
// message contains substr (the corrected request reached the agent).
func expectUser(substr string) func([]nodes.Message, []nodes.Definition) error {
	return func(msgs []nodes.Message, _ []nodes.Definition) error {
		for _, m := range msgs {
			if m.Role == nodes.RoleUser {
				if !strings.Contains(m.Content, substr) {
					return fmt.Errorf("the user message %q does not contain %q", m.Content, substr)
				}
				return nil
			}
		}
		return errors.New("no user message")
	}
}

// scripts is the model: one script per thread.
func scripts() demo.Scripts {
	return demo.Scripts{
		ThreadCompliance: scripted.New(
			scripted.CallTools("Quoting the Hotel Ritz first.",
				scripted.Call("quote-1", "quote_hotel", `{"hotel":"Hotel Ritz","city":"Lisbon","check_in":"2026-05-04","nights":2}`)).
				Expecting(expectUser(correctedGuest)),
			scripted.CallTools("The Hotel Ritz quotes 440 EUR for 2 nights, within the 1000 EUR limit. Booking it.",
				scripted.Call("book-1", "book_hotel", `{"guest":"Robert Tables","hotel":"Hotel Ritz","city":"Lisbon","check_in":"2026-05-04","nights":2,"total_eur":440}`)).
				Expecting(scripted.ExpectToolResult("quote-1", `"total_eur":440`)),
			scripted.Say("Booked: Robert Tables at the Hotel Ritz, Lisbon, 2 nights from 2026-05-04, for 440 EUR.").
				Expecting(scripted.ExpectToolResult("book-1", `"confirmation":"HB-`)), // executed, or replayed by the ledger after a stopped run
		),
		ThreadApproval: demo.Branch([]scripted.Turn{
			scripted.CallTools("Quoting Palácio Suites first.",
				scripted.Call("quote-1", "quote_hotel", `{"hotel":"Palácio Suites","city":"Porto","check_in":"2026-06-10","nights":4}`)).
				Expecting(expectUser("Ana Lima")),
			scripted.CallTools("Palácio Suites quotes 1520 EUR for 4 nights. That is above the 1000 EUR limit, so the travel desk must approve the booking.",
				scripted.Call("book-1", "book_hotel", `{"guest":"Ana Lima","hotel":"Palácio Suites","city":"Porto","check_in":"2026-06-10","nights":4,"total_eur":1520}`)).
				Expecting(scripted.ExpectToolResult("quote-1", `"total_eur":1520`)),
		}, map[nodes.Status][]scripted.Turn{
			nodes.StatusExecuted: {scripted.Say("The travel desk approved it: Ana Lima's stay at Palácio Suites, Porto, is booked.")},
			nodes.StatusRejected: {scripted.Say("I did not book Palácio Suites: the travel desk rejected the booking. Casa do Rio in Porto costs 95 EUR a night, if a cheaper stay will do.")},
			nodes.StatusExpired:  {scripted.Say("I did not book Palácio Suites: nobody approved the booking in time. Ask the travel desk before trying again.")},
		}),
	}
}

// app is the example wired to one database file.
type app struct {
	cfg    Config
	saver  *sqlite.Saver
	api    *HotelAPI
	store  approval.Store
	owns   func(thread string) bool // this example's threads
	inbox  *approval.Inbox
	worker *approval.Worker
	r      *graph.Runnable[State]
	log    *demo.DecisionLog
}

// open wires the example to cfg.DB: the saver, the fake hotel API, the
// ledger and the approval store (each in its own tables of the file), the
// executor and the graph, the inbox and the worker.
func open(ctx context.Context, cfg Config) (_ *app, err error) {
	saver, err := sqlite.Open(cfg.DB, sqlite.Config{Hook: testhook.From(ctx)}) // a crash test's hook, if ctx carries one
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			saver.Close()
		}
	}()
	db := saver.DB()
	api, err := OpenHotelAPI(ctx, db, cfg.Now)
	if err != nil {
		return nil, err
	}
	led, err := ledger.NewSQL(ctx, db, ledger.Options{Fence: saver}) // fenced by the thread's lease (D17)
	if err != nil {
		return nil, err
	}
	store, err := approval.OpenSQLStore(ctx, db, cfg.Now)
	if err != nil {
		return nil, err
	}
	tools, err := Tools(api)
	if err != nil {
		return nil, err
	}
	log := &demo.DecisionLog{}
	ex, err := nodes.NewExecutor(tools, nodes.WithPolicy(nodes.FromRules(Rules())), nodes.WithLedger(led), nodes.WithLogger(log.Logger()),
		nodes.WithObserver(cfg.Observer))
	if err != nil {
		return nil, err
	}
	g, err := newGraph(scripts(), ex, []nodes.ModelNodeOption{nodes.WithModelObserver(cfg.Observer)},
		nodes.WithNodeClock(cfg.Now), nodes.WithOutcomeRecorder(store))
	if err != nil {
		return nil, err
	}
	opts := []graph.Option{graph.WithSaver(saver), graph.WithRecursionLimit(recursionLimit), graph.WithName(GraphName), graph.WithObserver(cfg.Observer)}
	if cfg.Lease > 0 {
		opts = append(opts, graph.WithLeaseTTL(cfg.Lease))
	}
	r, err := g.Compile(opts...)
	if err != nil {
		return nil, err
	}
	owns := demo.Prefix(ThreadPrefix)
	wo := demo.WorkerOptions(cfg.Lease, owns)
	wo.Observer = cfg.Observer
	worker, err := approval.NewWorker(store, approval.ResumeGraph(r), wo)
	if err != nil {
		return nil, err
	}
	return &app{
		cfg: cfg, saver: saver, api: api, store: store, owns: owns, r: r, log: log,
		inbox:  approval.NewInbox(saver, store).ForThreads(owns).WithObserver(cfg.Observer),
		worker: worker,
	}, nil
}

// Run plays the example on the database cfg.DB and tells what happens on
// cfg.Out:
//
//  1. Thread ThreadCompliance asks for a booking whose guest name looks
//     like SQL injection. The compliance node holds it with a
//     NodeInterrupt; the thread waits (it has not failed). The reviewer
//     inspects the request, corrects the name with UpdateState, and
//     continues the run: the agent quotes and books, once.
//  2. Thread ThreadApproval asks for a booking above PriceLimitEUR: the
//     agent's book_hotel call is gated by an approval rule and the thread
//     waits for the travel desk. Decide it with the lockstep CLI, then run
//     again with cfg.Resume.
//
// A thread that already finished is not run again, so running the program
// twice books nothing twice. With cfg.Resume, Run only resumes the decided
// approvals of this example's threads (approval.Worker).
func Run(ctx context.Context, cfg Config) (_ Counts, err error) {
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.DB == "" {
		cfg.DB = DefaultDB
	}
	a, err := open(ctx, cfg)
	if err != nil {
		return Counts{}, err
	}
	defer func() { err = errors.Join(err, a.saver.Close()) }()
	p := demo.NewPrinter(cfg.Out)
	var c Counts
	if cfg.Resume {
		p.Printf("lockstep hotel booking: resuming the decided approvals in %s\n", cfg.DB)
		err = a.resume(ctx, p, &c)
	} else {
		p.Printf("lockstep hotel booking on %s (offline: a scripted model and a fake hotel API in table hotel_bookings)\n", cfg.DB)
		err = a.holdStory(ctx, p, &c)
		if err == nil {
			err = a.approvalStory(ctx, p)
		}
	}
	c.Booked, c.Quotes = a.api.Creates(), a.api.Quotes()
	if err != nil {
		return c, err
	}
	bookings, err := a.api.Bookings(ctx)
	if err != nil {
		return c, err
	}
	c.Bookings = len(bookings)
	p.Printf("\nhotel_bookings holds %d booking(s)", len(bookings))
	for i, b := range bookings {
		sep := ", "
		if i == 0 {
			sep = ": "
		}
		p.Printf("%s%s (%s, %s)", sep, b.Confirmation, b.Guest, b.Hotel)
	}
	p.Printf(". This run booked %d. Running it again books nothing twice.\n", c.Booked)
	return c, p.Err()
}

// holdStory is the first story: held by compliance, corrected, booked.
func (a *app) holdStory(ctx context.Context, p *demo.Printer, c *Counts) error {
	const thread = ThreadCompliance
	req := heldRequest()
	p.Printf("\nThread %s: book %s.\n", thread, req)
	snap, err := a.r.GetState(ctx, thread)
	continued := false
	switch {
	case errors.Is(err, graph.ErrThreadNotFound):
		if _, err := a.r.Invoke(ctx, thread, graph.Set(State{Request: req}, "Request")); err != nil {
			return err
		}
		if snap, err = a.r.GetState(ctx, thread); err != nil {
			return err
		}
		if heldAtCompliance(snap) {
			c.Holds++
			p.Printf("  The compliance node held the request before the agent saw it.\n")
		}
	case err != nil:
		return err
	case demo.Stopped(snap.Status):
		// An earlier run stopped mid-way (Ctrl-C): before the hold, or
		// after the correction. Take it on from where it stopped.
		if snap, err = demo.Continue(ctx, a.r, p, thread, snap); err != nil {
			return err
		}
		continued = true
		if heldAtCompliance(snap) {
			c.Holds++
			p.Printf("  The compliance node held the request before the agent saw it.\n")
		}
	}
	if snap.Status == graph.StatusDone {
		if continued {
			p.Printf("  Status done. Agent: %s\n", demo.LastAnswer(snap.Values.Messages))
			return a.bookedOnce(ctx, p, thread, snap.Values.Messages)
		}
		p.Printf("  Already finished (status done): nothing runs again, nothing is booked twice.\n  Agent: %s\n", demo.LastAnswer(snap.Values.Messages))
		return nil
	}
	if waitsOnApprovals(snap) {
		// An earlier run was stopped inside book_hotel, after the review:
		// the call asks whether to run it again, as report says.
		return a.report(ctx, p, thread, continued)
	}
	if !heldAtCompliance(snap) {
		return fmt.Errorf("booking: thread %s is %s with next %v; want it waiting at %s (inspect it with lockstep state %s)", thread, snap.Status, snap.Next, ComplianceNode, thread)
	}
	var hold Hold
	if err := snap.Interrupts[0].Decode(&hold); err != nil {
		return fmt.Errorf("booking: thread %s: read the compliance hold: %w", thread, err)
	}
	p.Printf("  The thread is waiting, not failed: status %s, next %v.\n", snap.Status, snap.Next)
	p.Printf("  Reason: %s.\n", hold.Reason)

	corrected := snap.Values.Request
	corrected.Guest = correctedGuest
	p.Printf("  Reviewer %s inspects the held request (%s %q) and corrects the guest name to %q (UpdateState).\n", Reviewer, hold.Field, hold.Value, correctedGuest)
	note := fmt.Sprintf("review: %s replaced guest %q with %q (name on the passport)", Reviewer, hold.Value, correctedGuest)
	if _, err := a.r.UpdateState(ctx, thread, graph.Set(State{Request: corrected, Audit: []string{note}}, "Request", "Audit"),
		graph.UpdateOptions{AsNode: graph.START}); err != nil {
		return err
	}
	c.Reviewed++
	mark := len(a.log.Events())
	res, err := a.r.Continue(ctx, thread)
	if err != nil {
		return err
	}
	p.Printf("  The run continues (Continue): compliance clears the request, the agent quotes, then books.\n")
	for _, e := range a.log.Events()[mark:] {
		p.Printf("    %s: %s\n", e.Tool, e.Status)
	}
	p.Printf("  Status %s. Agent: %s\n", res.Status, demo.LastAnswer(res.Values.Messages))
	if res.Status != graph.StatusDone {
		return nil
	}
	return a.bookedOnce(ctx, p, thread, res.Values.Messages)
}

// heldAtCompliance reports whether the thread waits on the compliance
// node's hold, and on nothing else.
func heldAtCompliance(snap graph.Snapshot[State]) bool {
	return snap.Status == graph.StatusWaiting && slices.Equal(snap.Next, []string{ComplianceNode}) && len(snap.Interrupts) == 1
}

// waitsOnApprovals reports whether the thread waits on approval requests,
// and on nothing else.
func waitsOnApprovals(snap graph.Snapshot[State]) bool {
	if snap.Status != graph.StatusWaiting || len(snap.Interrupts) == 0 {
		return false
	}
	for _, in := range snap.Interrupts {
		if _, ok, err := approval.ParseRequest(in.Value); err != nil || !ok {
			return false
		}
	}
	return true
}

// bookedOnce checks the booking that the conversation msgs reports against
// hotel_bookings, and says it was booked once only when the table holds
// exactly one row for that stay. It returns an error naming the thread
// when the conversation reports no booking or the table disagrees.
func (a *app) bookedOnce(ctx context.Context, p *demo.Printer, thread string, msgs []nodes.Message) error {
	b, ok := bookingOf(msgs)
	if !ok {
		return fmt.Errorf("booking: thread %s finished without a booking result (inspect it with lockstep state %s)", thread, thread)
	}
	all, err := a.api.Bookings(ctx)
	if err != nil {
		return err
	}
	n := 0
	for _, row := range all {
		if row.Guest == b.Guest && row.Hotel == b.Hotel && row.City == b.City && row.CheckIn == b.CheckIn {
			n++
		}
	}
	if n != 1 {
		return fmt.Errorf("booking: thread %s: hotel_bookings holds %d rows for %s at %s from %s, want 1", thread, n, b.Guest, b.Hotel, b.CheckIn)
	}
	p.Printf("  Booked once: confirmation %s, the only row in hotel_bookings for this stay.\n", b.Confirmation)
	return nil
}

// approvalStory is the second story: a booking above the limit waits for
// the travel desk.
func (a *app) approvalStory(ctx context.Context, p *demo.Printer) error {
	const thread = ThreadApproval
	req := gatedRequest()
	p.Printf("\nThread %s: book %s.\n", thread, req)
	_, err := a.r.GetState(ctx, thread)
	fresh := errors.Is(err, graph.ErrThreadNotFound)
	switch {
	case fresh:
		mark := len(a.log.Events())
		res, err := a.r.Invoke(ctx, thread, graph.Set(State{Request: req}, "Request"))
		if err != nil {
			return err
		}
		for _, e := range a.log.Events()[mark:] {
			p.Printf("    %s: %s\n", e.Tool, e.Status)
		}
		if res.Status == graph.StatusWaiting {
			p.Printf("  The agent: %q\n  The booking is above %d EUR, so book_hotel needs a human (rule %s); it did not run.\n",
				demo.LastAnswer(res.Values.Messages), PriceLimitEUR, RulePriceLimit)
		}
	case err != nil:
		return err
	}
	return a.report(ctx, p, thread, fresh)
}

// report prints a thread's status and, when it waits for approvals, what
// to do about them. fresh says the thread ran in this process.
func (a *app) report(ctx context.Context, p *demo.Printer, thread string, fresh bool) error {
	snap, err := a.r.GetState(ctx, thread)
	if errors.Is(err, graph.ErrThreadNotFound) {
		p.Printf("  Thread %s has not started: run the program without --resume first.\n", thread)
		return nil
	}
	if err != nil {
		return err
	}
	if demo.Stopped(snap.Status) {
		// An earlier run stopped mid-way (Ctrl-C): take it on from there.
		if snap, err = demo.Continue(ctx, a.r, p, thread, snap); err != nil {
			return err
		}
		fresh = true
	}
	switch snap.Status {
	case graph.StatusDone:
		if fresh {
			p.Printf("  Status done.\n")
		} else {
			p.Printf("  Already finished (status done): nothing runs again, nothing is booked twice.\n")
		}
		p.Printf("  Agent: %s\n", demo.LastAnswer(snap.Values.Messages))
		if b, ok := bookingOf(snap.Values.Messages); ok {
			p.Printf("  Its booking: confirmation %s, %d EUR.\n", b.Confirmation, b.TotalEUR)
		}
		return nil
	case graph.StatusWaiting:
	default:
		p.Printf("  Thread %s is %s (next %v): inspect it with `lockstep state %s`.\n", thread, snap.Status, snap.Next, thread)
		return nil
	}
	p.Printf("  The thread is waiting, not failed: status %s, next %v.\n", snap.Status, snap.Next)
	for _, in := range snap.Interrupts {
		req, ok, err := approval.ParseRequest(in.Value)
		if err != nil || !ok {
			p.Printf("  It waits on interrupt %s, which is not an approval: run the program without --resume to review it.\n", in.ID)
			continue
		}
		p.Printf("  Approval %s: %s %s for %s (rule %s), expires %s.\n", in.ID, req.Tool, req.Args, req.Owner, req.Rule, req.ExpiresAt.UTC().Format(time.RFC3339))
		_, err = a.inbox.Get(ctx, in.ID)
		var decided *approval.AlreadyDecidedError
		switch {
		case errors.As(err, &decided):
			p.Printf("  It was %s by %s: resume the thread with\n    %s --resume\n", decided.Winner.Outcome, decided.Winner.Reviewer, a.command("go run ./examples/hotelbooking"))
			continue
		case errors.Is(err, approval.ErrExpired):
			p.Printf("  Nobody decided it in time: its expiry is now recorded, as a rejection by %s. Resume the thread, and the agent is told:\n    %s --resume\n",
				approval.ExpiryReviewer, a.command("go run ./examples/hotelbooking"))
			continue
		case err != nil:
			return err
		}
		if req.Kind == approval.KindOutcomeUnknown {
			// Not the first request: an earlier run was stopped inside the
			// approved call, which may already have booked.
			key := nodes.IdempotencyKey(thread, req.Tool, req.Args)
			p.Printf("  It asks whether to run %s again (rule %s): an earlier attempt was stopped inside the call, so it may already have booked. Its outcome is unknown, and the agent's rationale was written before it.\n",
				req.Tool, req.Rule)
			p.Printf("  Before you decide, look in hotel_bookings for a booking under the call's idempotency key:\n    sqlite3 %s \"SELECT id, guest, hotel, check_in FROM hotel_bookings WHERE idempotency_key = '%s'\"\n",
				a.cfg.DB, key)
			p.Printf("  If there is one, the earlier attempt booked: approving runs the call again under that key, which the hotel answers with that booking instead of booking twice. If there is none, approving books it now. Reject it, with a note saying what you found, only if the stay was booked some other way.\n")
		}
		p.Printf("  Decide it with the lockstep CLI (go install ./cmd/lockstep), then resume the thread:\n")
		p.Printf("    %s approvals\n", a.command("lockstep"))
		p.Printf("    %s approve %s --reviewer you\n", a.command("lockstep"), in.ID)
		p.Printf("    %s --resume\n", a.command("go run ./examples/hotelbooking"))
	}
	return nil
}

// command returns cmd with --db when the database is not the default.
func (a *app) command(cmd string) string {
	if a.cfg.DB == DefaultDB || a.cfg.DB == strings.TrimPrefix(DefaultDB, "./") {
		return cmd
	}
	return cmd + " --db " + a.cfg.DB
}

// resume runs the approval worker once over this example's threads.
func (a *app) resume(ctx context.Context, p *demo.Printer, c *Counts) error {
	recs, err := demo.Unresumed(ctx, a.store, a.owns)
	if err != nil {
		return err
	}
	if len(recs) == 0 {
		p.Printf("\nNo decided approval waits to be resumed.\n")
	}
	for _, rec := range recs {
		d := rec.Decision
		p.Printf("\nApproval %s (%s on thread %s) was %s by %s", rec.ID, rec.Request.Tool, rec.Thread, d.Outcome, d.Reviewer)
		if d.Note != "" {
			p.Printf(" (%q)", d.Note)
		}
		p.Printf(".\n")
	}
	mark := len(a.log.Events())
	rep, err := a.worker.RunOnce(ctx)
	if err != nil {
		return err
	}
	c.Resumed = rep.Resumed
	if len(recs) > 0 {
		p.Printf("The approval worker resumed %d thread(s) (%d no longer waited, %d will be retried).\n", rep.Resumed, rep.Stale, rep.Deferred)
		for _, e := range a.log.Events()[mark:] {
			p.Printf("    %s: %s\n", e.Tool, e.Status)
		}
	}
	for _, rec := range recs {
		if r, err := a.store.Get(ctx, rec.ID); err == nil && r.Resume.LastError != "" && r.Resume.At.IsZero() {
			p.Printf("  Resuming %s failed and will be retried: %s\n", rec.Thread, r.Resume.LastError)
		}
	}
	for _, thread := range []string{ThreadCompliance, ThreadApproval} {
		p.Printf("\nThread %s:\n", thread)
		resumed := slices.ContainsFunc(recs, func(r approval.Record) bool { return r.Thread == thread })
		if err := a.report(ctx, p, thread, resumed); err != nil {
			return err
		}
	}
	return nil
}

// bookingOf returns the booking of the conversation's last successful
// book_hotel result.
func bookingOf(msgs []nodes.Message) (Booking, bool) {
	for i := len(msgs) - 1; i >= 0; i-- {
		m := msgs[i]
		if m.Role != nodes.RoleTool || m.Name != "book_hotel" {
			continue
		}
		var obs nodes.Observation
		var b Booking
		if json.Unmarshal([]byte(m.Content), &obs) != nil || len(obs.Result) == 0 || json.Unmarshal(obs.Result, &b) != nil {
			return Booking{}, false
		}
		return b, true
	}
	return Booking{}, false
}
