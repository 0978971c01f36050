package booking_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/lockstepgo/lockstep/approval"
	"github.com/lockstepgo/lockstep/checkpoint/sqlite"
	"github.com/lockstepgo/lockstep/examples/hotelbooking/booking"
	"github.com/lockstepgo/lockstep/examples/internal/demo"
	"github.com/lockstepgo/lockstep/internal/canon"
	"github.com/lockstepgo/lockstep/internal/testhook"
	"github.com/lockstepgo/lockstep/interrupt"
	"github.com/lockstepgo/lockstep/nodes"
	"github.com/lockstepgo/lockstep/nodes/ledger"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// run runs the example on db and returns its counts and narrative.
func run(t *testing.T, db string, resume bool) (booking.Counts, string) {
	t.Helper()
	var out bytes.Buffer
	c, err := booking.Run(context.Background(), booking.Config{DB: db, Out: &out, Resume: resume})
	if err != nil {
		t.Fatalf("Run(resume=%v): %v\noutput:\n%s", resume, err, out.String())
	}
	return c, out.String()
}

// wantLines checks that out holds every line of want, in order.
func wantLines(t *testing.T, out string, want ...string) {
	t.Helper()
	rest := out
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Errorf("output lacks %q (after the lines before it)\noutput:\n%s", w, out)
			return
		}
		rest = rest[i+len(w):]
	}
}

// threadView is what the lockstep CLI shows of a thread: its status, next
// tasks and pending interrupts.
type threadView struct {
	Status     string
	Next       []string
	Interrupts int
}

// cliView reads the example's threads from the file alone, as `lockstep
// threads` and `lockstep state` do (checkpoint.Inspect).
func cliView(t *testing.T, db string) map[string]threadView {
	t.Helper()
	s, err := sqlite.Open(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out := map[string]threadView{}
	for _, thread := range []string{booking.ThreadCompliance, booking.ThreadApproval} {
		in, err := demo.Inspect(context.Background(), s, thread)
		if err != nil {
			t.Fatalf("inspect %s: %v", thread, err)
		}
		out[thread] = threadView{Status: in.Status, Next: in.Next, Interrupts: len(in.Interrupts)}
	}
	return out
}

// pending lists the pending approvals of the file as `lockstep approvals`
// does.
func pending(t *testing.T, db string) []approval.Item {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	store, err := approval.OpenSQLStore(ctx, s.DB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	page, err := approval.NewInbox(s, store).List(ctx, approval.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	return page.Items
}

// decide records a verdict as `lockstep approve` and `lockstep reject` do,
// from another process's point of view: its own saver on the file.
func decide(t *testing.T, db, id string, v approval.Verdict) {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	store, err := approval.OpenSQLStore(ctx, s.DB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := approval.NewInbox(s, store).Decide(ctx, id, v); err != nil {
		t.Fatal(err)
	}
}

func bookings(t *testing.T, db string) []string {
	t.Helper()
	s, err := sqlite.Open(db, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	api, err := booking.OpenHotelAPI(context.Background(), s.DB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	bs, err := api.Bookings(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, b := range bs {
		out = append(out, b.Confirmation+" "+b.Guest+" "+b.Hotel)
	}
	return out
}

// TestHotelBooking plays the README's session: the program, the CLI's
// view, an approval with the CLI, the program with --resume, and every
// step again. Nothing is booked twice.
func TestHotelBooking(t *testing.T) {
	db := filepath.Join(t.TempDir(), "lockstep.db")

	c, out := run(t, db, false)
	if d := cmp.Diff(booking.Counts{Bookings: 1, Booked: 1, Quotes: 2, Holds: 1, Reviewed: 1}, c); d != "" {
		t.Errorf("first run counts (-want +got):\n%s", d)
	}
	wantLines(t, out,
		`Thread hotel-lisbon-robert: book Hotel Ritz, Lisbon, 2 nights from 2026-05-04, for guest "Robert'); DROP TABLE bookings;--".`,
		"The compliance node held the request before the agent saw it.",
		"The thread is waiting, not failed: status waiting, next [compliance].",
		`Reason: the guest field looks like SQL injection (it contains "drop table").`,
		`Reviewer Priya Raman (compliance) inspects the held request`,
		`corrects the guest name to "Robert Tables" (UpdateState).`,
		"quote_hotel: executed",
		"book_hotel: executed",
		"Status done. Agent: Booked: Robert Tables at the Hotel Ritz, Lisbon, 2 nights from 2026-05-04, for 440 EUR.",
		"Booked once: confirmation HB-0001, the only row in hotel_bookings for this stay.",
		"Thread hotel-porto-ana:",
		"book_hotel: blocked",
		"so book_hotel needs a human (rule price_over_1000_eur); it did not run.",
		"The thread is waiting, not failed: status waiting, next [tools].",
		"Decide it with the lockstep CLI (go install ./cmd/lockstep), then resume the thread:",
		"lockstep --db "+db+" approve ",
		"go run ./examples/hotelbooking --db "+db+" --resume",
		"hotel_bookings holds 1 booking(s): HB-0001 (Robert Tables, Hotel Ritz). This run booked 1.",
	)
	wantView := map[string]threadView{
		booking.ThreadCompliance: {Status: "done"},
		booking.ThreadApproval:   {Status: "waiting", Next: []string{"tools"}, Interrupts: 1},
	}
	if d := cmp.Diff(wantView, cliView(t, db)); d != "" {
		t.Errorf("CLI view after the first run (-want +got):\n%s", d)
	}
	items := pending(t, db)
	if len(items) != 1 {
		t.Fatalf("%d pending approvals, want 1: %+v", len(items), items)
	}
	req := items[0].Request
	var args booking.BookArgs
	if err := json.Unmarshal(req.Args, &args); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{booking.ThreadApproval, "book_hotel", booking.RulePriceLimit, booking.Approver, "Ana Lima"},
		[]string{items[0].Thread, req.Tool, req.Rule, req.Owner, args.Guest}); d != "" {
		t.Errorf("pending approval (-want +got):\n%s", d)
	}
	if args.TotalEUR != 1520 || !strings.Contains(req.Rationale, "above the 1000 EUR limit") {
		t.Errorf("approval total %d, rationale %q", args.TotalEUR, req.Rationale)
	}
	if !strings.Contains(out, "approve "+items[0].ID+" --reviewer you") {
		t.Errorf("the narrative does not give the approval's ID %s", items[0].ID)
	}

	// Again, undecided: nothing runs, nothing is booked.
	c, out = run(t, db, false)
	if d := cmp.Diff(booking.Counts{Bookings: 1}, c); d != "" {
		t.Errorf("second run counts (-want +got):\n%s", d)
	}
	wantLines(t, out, "Already finished (status done): nothing runs again, nothing is booked twice.", "The thread is waiting, not failed", "approve "+items[0].ID)
	c, out = run(t, db, true)
	if d := cmp.Diff(booking.Counts{Bookings: 1}, c); d != "" {
		t.Errorf("resume before the decision (-want +got):\n%s", d)
	}
	wantLines(t, out, "No decided approval waits to be resumed.")

	// lockstep approve ID --reviewer you, then --resume.
	decide(t, db, items[0].ID, approval.Verdict{Outcome: approval.Approved, Reviewer: "you"})
	c, out = run(t, db, false)
	if d := cmp.Diff(booking.Counts{Bookings: 1}, c); d != "" {
		t.Errorf("run after the decision, before resuming (-want +got):\n%s", d)
	}
	wantLines(t, out, "It was approved by you: resume the thread with")
	c, out = run(t, db, true)
	if d := cmp.Diff(booking.Counts{Bookings: 2, Booked: 1, Resumed: 1}, c); d != "" {
		t.Errorf("resume counts (-want +got):\n%s", d)
	}
	wantLines(t, out,
		"Approval "+items[0].ID+" (book_hotel on thread hotel-porto-ana) was approved by you.",
		"The approval worker resumed 1 thread(s)",
		"book_hotel: approved",
		"book_hotel: executed",
		"Agent: The travel desk approved it: Ana Lima's stay at Palácio Suites, Porto, is booked.",
		"Its booking: confirmation HB-0002, 1520 EUR.",
		"hotel_bookings holds 2 booking(s)",
	)
	wantView = map[string]threadView{booking.ThreadCompliance: {Status: "done"}, booking.ThreadApproval: {Status: "done"}}
	if d := cmp.Diff(wantView, cliView(t, db)); d != "" {
		t.Errorf("CLI view after resuming (-want +got):\n%s", d)
	}

	// Every command again: nothing repeats.
	for _, resume := range []bool{false, true} {
		c, _ := run(t, db, resume)
		if d := cmp.Diff(booking.Counts{Bookings: 2}, c); d != "" {
			t.Errorf("repeat (resume=%v) counts (-want +got):\n%s", resume, d)
		}
	}
	if d := cmp.Diff([]string{"HB-0001 Robert Tables Hotel Ritz", "HB-0002 Ana Lima Palácio Suites"}, bookings(t, db)); d != "" {
		t.Errorf("hotel_bookings (-want +got):\n%s", d)
	}
	if n := len(pending(t, db)); n != 0 {
		t.Errorf("%d approvals still pending", n)
	}
}

// TestHotelBookingRejected: a rejection reaches the agent as a tool
// result; it says it did not book, and nothing is booked.
func TestHotelBookingRejected(t *testing.T) {
	db := filepath.Join(t.TempDir(), "lockstep.db")
	run(t, db, false)
	items := pending(t, db)
	if len(items) != 1 {
		t.Fatalf("%d pending approvals, want 1", len(items))
	}
	decide(t, db, items[0].ID, approval.Verdict{Outcome: approval.Rejected, Reviewer: "you", Note: "too expensive"})
	c, out := run(t, db, true)
	if d := cmp.Diff(booking.Counts{Bookings: 1, Resumed: 1}, c); d != "" {
		t.Errorf("counts (-want +got):\n%s", d)
	}
	wantLines(t, out, `was rejected by you ("too expensive").`, "book_hotel: rejected", "Agent: I did not book Palácio Suites: the travel desk rejected the booking.")
}

// TestCompliance: what the compliance node holds and what it passes.
func TestCompliance(t *testing.T) {
	for _, tc := range []struct {
		name  string
		req   booking.Request
		field string // "" when it passes
	}{
		{"clean", booking.Request{Guest: "Robert Tables", Hotel: "Hotel Ritz", City: "Lisbon", CheckIn: "2026-05-04", Nights: 2}, ""},
		{"apostrophe in a name", booking.Request{Guest: "Seán O'Brien", Hotel: "Hotel Ritz", City: "Lisbon", CheckIn: "2026-05-04", Nights: 2}, ""},
		{"drop table", booking.Request{Guest: "Robert'); DROP TABLE bookings;--", Hotel: "Hotel Ritz", City: "Lisbon", CheckIn: "2026-05-04", Nights: 1}, "guest"},
		{"union select", booking.Request{Guest: "Ana", Hotel: "x' UNION SELECT card FROM payments", City: "Porto", CheckIn: "2026-05-04", Nights: 1}, "hotel"},
		{"tautology", booking.Request{Guest: "Ana", Hotel: "Casa do Rio", City: "Porto", CheckIn: "2026-05-04' OR 1=1", Nights: 1}, "check_in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := booking.Compliance(context.Background(), booking.State{Request: tc.req})
			var field string
			if err != nil {
				var hold booking.Hold
				if !holdOf(err, &hold) {
					t.Fatalf("Compliance: %v, want a NodeInterrupt or nothing", err)
				}
				field = hold.Field
			} else if len(u.Value().Messages) != 1 || !strings.Contains(u.Value().Messages[0].Content, tc.req.Guest) {
				t.Errorf("passed without the request as the user message: %+v", u.Value().Messages)
			}
			if field != tc.field {
				t.Errorf("held field %q, want %q", field, tc.field)
			}
		})
	}
}

// holdOf reports whether err is the compliance node's NodeInterrupt, and
// copies its Hold.
func holdOf(err error, hold *booking.Hold) bool {
	var ni *interrupt.NodeInterrupt
	if !errors.As(err, &ni) {
		return false
	}
	h, ok := ni.Value.(booking.Hold)
	*hold = h
	return ok
}

// TestHotelBookingOutcomeUnknown: an earlier run was killed inside the
// approved booking of ThreadApproval, after the hotel booked it. Resumed,
// the call finds that attempt, and the thread waits again, on whether to
// run it again: the program says what that means and how to check
// hotel_bookings (the query, with the call's idempotency key) before
// deciding. Approved after the check, it books nothing twice.
func TestHotelBookingOutcomeUnknown(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "lockstep.db")
	run(t, db, false)
	items := pending(t, db)
	if len(items) != 1 {
		t.Fatalf("%d pending approvals, want 1", len(items))
	}
	decide(t, db, items[0].ID, approval.Verdict{Outcome: approval.Approved, Reviewer: "you"})

	// What the killed run left: its intent, and the booking it made.
	args, err := canon.JSON(json.RawMessage(`{"guest":"Ana Lima","hotel":"Palácio Suites","city":"Porto","check_in":"2026-06-10","nights":4,"total_eur":1520}`))
	if err != nil {
		t.Fatal(err)
	}
	key := nodes.IdempotencyKey(booking.ThreadApproval, "book_hotel", args)
	func() {
		s, err := sqlite.Open(db, sqlite.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		hash, err := approval.ArgsHash("book_hotel", args)
		if err != nil {
			t.Fatal(err)
		}
		led, err := ledger.NewSQL(ctx, s.DB(), ledger.Options{Now: func() time.Time { return time.Now().Add(-time.Hour) }})
		if err != nil {
			t.Fatal(err)
		}
		if _, started, err := led.Begin(ctx, ledger.Intent{Key: key, Tool: "book_hotel", ArgsHash: hash, Owner: "killed-run", Lease: time.Minute}); err != nil || !started {
			t.Fatalf("the killed run's intent: %v, %v", started, err)
		}
		api, err := booking.OpenHotelAPI(ctx, s.DB(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var ba booking.BookArgs
		if err := json.Unmarshal(args, &ba); err != nil {
			t.Fatal(err)
		}
		if _, err := api.Book(ctx, ba, key); err != nil {
			t.Fatal(err)
		}
	}()

	_, out := run(t, db, true)
	wantLines(t, out,
		"book_hotel: approved",
		"Thread hotel-porto-ana:",
		"The thread is waiting, not failed",
		"(rule outcome_unknown)",
		"It asks whether to run book_hotel again (rule outcome_unknown): an earlier attempt was stopped inside the call, so it may already have booked.",
		"Before you decide, look in hotel_bookings for a booking under the call's idempotency key:",
		"WHERE idempotency_key = '"+key+"'",
		"If there is one, the earlier attempt booked",
		"Decide it with the lockstep CLI",
	)
	items = pending(t, db)
	if len(items) != 1 || items[0].Request.Kind != approval.KindOutcomeUnknown {
		t.Fatalf("pending approvals %+v, want the outcome-unknown one", items)
	}
	decide(t, db, items[0].ID, approval.Verdict{Outcome: approval.Approved, Reviewer: "you", Note: "checked hotel_bookings: HB-0002 is there"})
	_, out = run(t, db, true)
	wantLines(t, out, "book_hotel: executed", "Agent: The travel desk approved it")
	if got := bookings(t, db); len(got) != 2 {
		t.Errorf("bookings %v, want 2: nothing booked twice", got)
	}
}

// TestHoldStoryOutcomeUnknown: a run stopped inside the held thread's
// booking (ungated, after the reviewer's correction), after the hotel
// booked it. The next run finds the call's outcome unknown: the thread
// waits on whether to run it again, and the program says so and goes on
// with its second story instead of failing. Approved (the check finds
// the booking under the call's key), the worker resumes it: booked once.
func TestHoldStoryOutcomeUnknown(t *testing.T) {
	db := filepath.Join(t.TempDir(), "lockstep.db")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := testhook.With(ctx, func(point string) {
		if point == booking.HookAfterBook {
			cancel() // a Ctrl-C right after the hotel booked
		}
	})
	if _, err := booking.Run(stop, booking.Config{DB: db}); err == nil {
		t.Fatal("the run stopped inside book_hotel returned no error")
	}
	if got := bookings(t, db); len(got) != 1 {
		t.Fatalf("bookings after the stopped run: %v, want 1", got)
	}

	_, out := run(t, db, false)
	wantLines(t, out,
		"Thread hotel-lisbon-robert:",
		"The thread is waiting, not failed",
		"(rule outcome_unknown)",
		"It asks whether to run book_hotel again",
		"Thread hotel-porto-ana:",
		"The thread is waiting, not failed",
		"(rule price_over_1000_eur)",
	)
	items := pending(t, db)
	if len(items) != 2 {
		t.Fatalf("%d pending approvals, want 2 (the outcome-unknown booking and the gated one)", len(items))
	}
	for _, it := range items {
		decide(t, db, it.ID, approval.Verdict{Outcome: approval.Approved, Reviewer: "you", Note: "checked hotel_bookings"})
	}
	_, out = run(t, db, true)
	wantLines(t, out,
		"Thread hotel-lisbon-robert:", "Agent: Booked: Robert Tables",
		"Thread hotel-porto-ana:", "Agent: The travel desk approved it")
	if got := bookings(t, db); len(got) != 2 {
		t.Errorf("bookings %v, want 2: nothing booked twice", got)
	}
}
