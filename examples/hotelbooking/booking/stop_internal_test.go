package booking

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/examples/internal/demotest"
	"github.com/lockstepgo/lockstep/nodes"
)

// TestRunAfterStoppedRun stops the first run at every point where a
// Ctrl-C can land (after each task, before and after each save, counted
// over the whole run) by cancelling its context there, then runs the
// program again on the file: the second run takes the stopped thread on
// from where it stopped and ends as an uninterrupted first run does
// (Robert booked once, Ana waiting for the travel desk), and a third run
// books nothing.
func TestRunAfterStoppedRun(t *testing.T) {
	run := func(ctx context.Context, db string) error {
		_, err := Run(ctx, Config{DB: db})
		return err
	}
	demotest.AtEveryStop(t, run, func(t *testing.T, db string) {
		var out bytes.Buffer
		c, err := Run(context.Background(), Config{DB: db, Out: &out})
		if err != nil {
			t.Fatalf("the run after the stop: %v\noutput:\n%s", err, out.String())
		}
		if c.Bookings != 1 {
			t.Errorf("after the run after the stop hotel_bookings holds %d rows, want 1\noutput:\n%s", c.Bookings, out.String())
		}
		a, err := open(context.Background(), Config{DB: db})
		if err != nil {
			t.Fatal(err)
		}
		defer a.saver.Close()
		got := map[string]string{}
		for _, thread := range []string{ThreadCompliance, ThreadApproval} {
			snap, err := a.r.GetState(context.Background(), thread)
			if err != nil {
				t.Fatal(err)
			}
			got[thread] = fmt.Sprintf("%s %v", snap.Status, snap.Next)
		}
		want := map[string]string{ThreadCompliance: "done []", ThreadApproval: "waiting [tools]"}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("threads after the run after the stop (-want +got):\n%s\noutput:\n%s", d, out.String())
		}
		bs, err := a.api.Bookings(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(bs) != 1 || bs[0].Guest != correctedGuest {
			t.Errorf("hotel_bookings = %+v, want one booking for %s", bs, correctedGuest)
		}
	})
}

// TestScriptsAnswerReplayedBooking: a run stopped after book_hotel booked
// but before its step was saved is continued with the ledger answering the
// call as replayed; the agent reports the booking as it does after an
// executed call, on both threads.
func TestScriptsAnswerReplayedBooking(t *testing.T) {
	booked := `"result":{"confirmation":"HB-0001","guest":"Robert Tables","hotel":"Hotel Ritz","city":"Lisbon","check_in":"2026-05-04","nights":2,"total_eur":440}`
	conversation := func(thread string, st nodes.Status) []nodes.Message {
		guest, quote := correctedGuest, `{"status":"executed","result":{"total_eur":440}}`
		if thread == ThreadApproval {
			guest, quote = "Ana Lima", `{"status":"executed","result":{"total_eur":1520}}`
		}
		return []nodes.Message{
			{Role: nodes.RoleUser, Content: "Please book for " + guest},
			{Role: nodes.RoleAssistant, ToolCalls: []nodes.ToolCall{{ID: "quote-1", Name: "quote_hotel", Arguments: "{}"}}},
			{Role: nodes.RoleTool, ToolCallID: "quote-1", Name: "quote_hotel", Content: quote},
			{Role: nodes.RoleAssistant, ToolCalls: []nodes.ToolCall{{ID: "book-1", Name: "book_hotel", Arguments: "{}"}}},
			{Role: nodes.RoleTool, ToolCallID: "book-1", Name: "book_hotel", Content: `{"status":"` + string(st) + `",` + booked + `}`},
		}
	}
	for _, thread := range []string{ThreadCompliance, ThreadApproval} {
		t.Run(thread, func(t *testing.T) {
			m := scripts()[thread]
			var got []string
			for _, st := range []nodes.Status{nodes.StatusExecuted, nodes.StatusReplayed} {
				out, err := m.Generate(context.Background(), conversation(thread, st), nil)
				if err != nil {
					t.Fatalf("after a %s booking: %v", st, err)
				}
				got = append(got, out.Content)
			}
			if got[0] == "" || got[0] != got[1] {
				t.Errorf("answer after an executed booking %q, after a replayed one %q; want the same", got[0], got[1])
			}
		})
	}
}
