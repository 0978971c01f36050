package refunds_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/examples/internal/demo"
	"github.com/lockstepgo/lockstep/examples/internal/demotest"
	"github.com/lockstepgo/lockstep/examples/refund/refunds"
)

// TestRunAfterStoppedRun stops the first run at every point where a
// Ctrl-C can land (after each task, before and after each save, counted
// over the whole run) by cancelling its context there, then runs the
// program again on the file: it takes a stopped thread on from where it
// stopped, and the file ends as after an uninterrupted run: both threads
// done, Mia refunded once, Leo told his request expired.
func TestRunAfterStoppedRun(t *testing.T) {
	run := func(ctx context.Context, db string) error {
		_, err := refunds.Run(ctx, refunds.Config{DB: db})
		return err
	}
	demotest.AtEveryStop(t, run, func(t *testing.T, db string) {
		var out bytes.Buffer
		if _, err := refunds.Run(context.Background(), refunds.Config{DB: db, Out: &out}); err != nil {
			t.Fatalf("the run after the stop: %v\noutput:\n%s", err, out.String())
		}
		a, err := refunds.Open(context.Background(), refunds.Config{DB: db})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		got := map[string]string{}
		for _, thread := range []string{refunds.ThreadPaid, refunds.ThreadExpired} {
			snap, err := a.Runnable.GetState(context.Background(), thread)
			if err != nil {
				t.Fatal(err)
			}
			greeting, _, _ := strings.Cut(demo.LastAnswer(snap.Values.Messages), ":")
			got[thread] = fmt.Sprintf("%s: %s", snap.Status, greeting)
		}
		want := map[string]string{refunds.ThreadPaid: "done: Good news, Mia Chen", refunds.ThreadExpired: "done: I'm sorry, Leo Park"}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("threads after the run after the stop (-want +got):\n%s\noutput:\n%s", d, out.String())
		}
		pays, err := a.Shop.Payments(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(pays) != 1 || pays[0].Order != "A-1001" {
			t.Errorf("refund_payments = %+v, want one payment for A-1001", pays)
		}
	})
}
