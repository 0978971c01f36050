package approval_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockstepgo/lockstep/approval"
)

// TestWaitImmediateReply: a reviewer who answers while the request is
// being published (before Wait could start reading) is not lost, because
// Wait subscribed first. The same reply sent before anyone subscribed is
// dropped by the channel, which is what makes the order matter.
func TestWaitImmediateReply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		req := newRequest(t, refundSchema(t), time.Now(), "o1", 40)
		var ch *approval.MemoryChannel
		delivered := -1
		ch = approval.NewMemoryChannel(func(id string, _ approval.Request) {
			delivered = ch.Reply(id, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice", Note: "at once"})
		})
		if n := ch.Reply("a1", approval.Verdict{Outcome: approval.Approved, Reviewer: "early"}); n != 0 {
			t.Fatalf("a reply with no subscriber reached %d", n)
		}
		d, err := approval.Wait(context.Background(), ch, "a1", req, approval.WaitOptions{Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		want := approval.Decision{ID: "a1", Outcome: approval.Approved, Reviewer: "alice", Note: "at once", ArgsHash: req.ArgsHash, DecidedAt: time.Now().UTC()}
		if diff := cmp.Diff(want, d); diff != "" {
			t.Errorf("Wait (-want +got):\n%s", diff)
		}
		if delivered != 1 {
			t.Errorf("the immediate reply reached %d subscriptions, want 1", delivered)
		}

		// The wrong order, publishing before subscribing, loses it.
		if err := ch.Publish(context.Background(), "a2", req); err != nil {
			t.Fatal(err)
		}
		sub, err := ch.Subscribe(context.Background(), "a2")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := sub.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("subscribing after publishing: %v, want the reply lost", err)
		}
	})
}

// TestWaitTimeout: nobody answers; the wait ends at its bound (the
// timeout, or the request's expiry, whichever is first) with an Expired
// decision, a rejection the model can act on, and no error.
func TestWaitTimeout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		want    time.Duration
	}{
		{"timeout", 5 * time.Minute, 5 * time.Minute},
		{"request expiry", 0, ttl},
		{"expiry before the timeout", 3 * ttl, ttl},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				req := newRequest(t, refundSchema(t), start, "o1", 40)
				ch := approval.NewMemoryChannel(nil)
				d, err := approval.Wait(context.Background(), ch, "a1", req, approval.WaitOptions{Timeout: tc.timeout})
				if err != nil {
					t.Fatal(err)
				}
				if got := time.Since(start); got != tc.want {
					t.Errorf("waited %v, want %v", got, tc.want)
				}
				if d.Outcome != approval.Expired || d.Reviewer != approval.ExpiryReviewer || d.Allows() || d.ArgsHash != req.ArgsHash {
					t.Errorf("decision %+v, want an expiry", d)
				}
			})
		})
	}
}

// TestWaitLateReply: a reply that arrives once the request has expired by
// the injected clock is not an approval.
func TestWaitLateReply(t *testing.T) {
	clock := newClock()
	req := newRequest(t, refundSchema(t), clock.Now(), "o1", 40)
	var ch *approval.MemoryChannel
	ch = approval.NewMemoryChannel(func(id string, _ approval.Request) {
		clock.Add(ttl)
		ch.Reply(id, approval.Verdict{Outcome: approval.Approved, Reviewer: "alice"})
	})
	d, err := approval.Wait(context.Background(), ch, "a1", req, approval.WaitOptions{Now: clock.Now})
	if err != nil || d.Outcome != approval.Expired || !d.DecidedAt.Equal(epoch.Add(ttl)) {
		t.Fatalf("late reply: %+v, %v; want an expiry at the deadline", d, err)
	}
}

// TestWaitReplies: replies are checked like stored decisions.
func TestWaitReplies(t *testing.T) {
	schema := refundSchema(t)
	edited := json.RawMessage(`{"amount":10,"order":"o1"}`)
	editedHash, _ := approval.ArgsHash("refund", edited)
	tests := []struct {
		name    string
		v       approval.Verdict
		want    approval.Decision
		wantErr error
	}{
		{"reject", approval.Verdict{Outcome: approval.Rejected, Reviewer: "bob", Note: "no"},
			approval.Decision{Outcome: approval.Rejected, Reviewer: "bob", Note: "no"}, nil},
		{"edit", approval.Verdict{Outcome: approval.Edited, Reviewer: "bob", Args: json.RawMessage(`{"order":"o1","amount":10}`)},
			approval.Decision{Outcome: approval.Edited, Reviewer: "bob", Args: edited, ArgsHash: editedHash}, nil},
		{"yes", approval.Verdict{Outcome: "yes", Reviewer: "bob"}, approval.Decision{}, approval.ErrInvalidDecision},
		{"system reviewer", approval.Verdict{Outcome: approval.Approved, Reviewer: approval.ExpiryReviewer}, approval.Decision{}, approval.ErrInvalidDecision},
		{"expiry from a reviewer", approval.Verdict{Outcome: approval.Expired, Reviewer: approval.ExpiryReviewer}, approval.Decision{}, approval.ErrInvalidDecision},
		{"edit off schema", approval.Verdict{Outcome: approval.Edited, Reviewer: "bob", Args: json.RawMessage(`{"order":"o1","amount":-5}`)}, approval.Decision{}, approval.ErrInvalidArgs},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := newClock()
			req := newRequest(t, schema, clock.Now(), "o1", 40)
			var ch *approval.MemoryChannel
			ch = approval.NewMemoryChannel(func(id string, _ approval.Request) { ch.Reply(id, tc.v) })
			d, err := approval.Wait(context.Background(), ch, "a1", req, approval.WaitOptions{Now: clock.Now})
			if !errors.Is(err, tc.wantErr) || tc.wantErr == nil && err != nil {
				t.Fatalf("Wait: %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr != nil {
				return
			}
			tc.want.DecidedAt, tc.want.ID = epoch, "a1"
			if tc.want.ArgsHash == "" {
				tc.want.ArgsHash = req.ArgsHash
			}
			if diff := cmp.Diff(tc.want, d); diff != "" {
				t.Errorf("Wait (-want +got):\n%s", diff)
			}
		})
	}
}

// brokenChannel fails where it is told to.
type brokenChannel struct {
	subscribe, publish, next error
}

func (b brokenChannel) Subscribe(context.Context, string) (approval.Subscription, error) {
	if b.subscribe != nil {
		return nil, b.subscribe
	}
	return brokenSub{b.next}, nil
}

func (b brokenChannel) Publish(context.Context, string, approval.Request) error { return b.publish }

type brokenSub struct{ err error }

func (s brokenSub) Next(context.Context) (approval.Verdict, error) { return approval.Verdict{}, s.err }
func (s brokenSub) Close() error                                   { return nil }

// TestWaitChannelFailure: when the channel itself fails, Wait aborts with
// a *ChannelError (matching ErrChannel and unwrapping to the cause), not
// with a decision; when the caller's context ends, with its error.
func TestWaitChannelFailure(t *testing.T) {
	down := errors.New("bus unreachable")
	for _, tc := range []struct {
		name string
		ch   approval.Channel
		op   string
	}{
		{"subscribe", brokenChannel{subscribe: down}, "subscribe"},
		{"publish", brokenChannel{publish: down}, "publish"},
		{"receive", brokenChannel{next: down}, "receive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := newRequest(t, refundSchema(t), time.Now(), "o1", 40)
			d, err := approval.Wait(context.Background(), tc.ch, "a1", req, approval.WaitOptions{Timeout: time.Minute})
			var ce *approval.ChannelError
			if !errors.As(err, &ce) || !errors.Is(err, approval.ErrChannel) || !errors.Is(err, down) || ce.Op != tc.op || ce.ID != "a1" {
				t.Fatalf("Wait: %v, want a *ChannelError on %s", err, tc.op)
			}
			if d.Outcome != "" {
				t.Errorf("a failed channel produced a decision: %+v", d)
			}
			if want := "approval: confirmation channel failed to " + tc.op + ` (approval "a1"): bus unreachable`; err.Error() != want {
				t.Errorf("message %q, want %q", err, want)
			}
		})
	}
	t.Run("closed while waiting", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			req := newRequest(t, refundSchema(t), time.Now(), "o1", 40)
			ch := approval.NewMemoryChannel(nil)
			go func() {
				time.Sleep(time.Second)
				ch.Close()
			}()
			_, err := approval.Wait(context.Background(), ch, "a1", req, approval.WaitOptions{Timeout: time.Minute})
			if !errors.Is(err, approval.ErrChannel) || !errors.Is(err, approval.ErrChannelClosed) {
				t.Fatalf("Wait: %v, want a channel failure", err)
			}
		})
	})
	t.Run("caller gives up", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			req := newRequest(t, refundSchema(t), time.Now(), "o1", 40)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err := approval.Wait(ctx, approval.NewMemoryChannel(nil), "a1", req, approval.WaitOptions{Timeout: time.Minute})
			if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, approval.ErrChannel) {
				t.Fatalf("Wait: %v, want the caller's deadline", err)
			}
		})
	})
	t.Run("invalid request", func(t *testing.T) {
		req := newRequest(t, refundSchema(t), time.Now(), "o1", 40)
		req.ExpiresAt = time.Time{}
		if _, err := approval.Wait(context.Background(), approval.NewMemoryChannel(nil), "a1", req, approval.WaitOptions{}); !errors.Is(err, approval.ErrInvalidExpiry) {
			t.Fatalf("Wait: %v, want ErrInvalidExpiry", err)
		}
	})
}

// TestMemoryChannelContainsOnPublish: onPublish is the application's code.
// One that panics fails the Publish with a *PanicError (Wait returns a
// *ChannelError around it) instead of taking the process; one that blocks
// holds a Publish whose context ends no longer than a short grace.
func TestMemoryChannelContainsOnPublish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		req := newRequest(t, refundSchema(t), time.Now(), "o1", 40)
		ch := approval.NewMemoryChannel(func(string, approval.Request) { panic("the UI is gone") })
		var pe *approval.PanicError
		if err := ch.Publish(context.Background(), "a1", req); !errors.As(err, &pe) || pe.ID != "a1" || pe.Value != "the UI is gone" {
			t.Errorf("Publish with a panicking onPublish: %v, want a *PanicError for a1", err)
		}
		_, err := approval.Wait(context.Background(), ch, "a1", req, approval.WaitOptions{Timeout: time.Minute})
		var ce *approval.ChannelError
		if !errors.As(err, &ce) || ce.Op != "publish" || !errors.As(err, &pe) {
			t.Errorf("Wait with a panicking onPublish: %v, want a *ChannelError around a *PanicError", err)
		}

		release := make(chan struct{})
		blocked := approval.NewMemoryChannel(func(string, approval.Request) { <-release })
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		err = blocked.Publish(ctx, "a2", req)
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
			t.Errorf("Publish with a blocking onPublish: %v after %v, want the deadline's error within a grace of it", err, time.Since(start))
		}
		close(release)
		synctest.Wait()
	})
}
