package approval

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lockstepgo/lockstep/internal/safe"
)

// Channel carries approval requests to reviewers and their verdicts back,
// for synchronous flows that wait in process instead of pausing the graph
// (a chat bot that asks in a Slack thread, say). Implementations wrap a
// message bus; MemoryChannel is one in process.
type Channel interface {
	// Subscribe starts listening for verdicts on approval id. A verdict
	// published after Subscribe returned must reach the subscription; one
	// published before may be lost. An error means the subscription could
	// not be made; Wait reports it as a *ChannelError.
	Subscribe(ctx context.Context, id string) (Subscription, error)
	// Publish shows the request to reviewers. An error means reviewers may
	// not have seen it; Wait reports it as a *ChannelError.
	Publish(ctx context.Context, id string, req Request) error
}

// Subscription receives the verdicts on one approval.
type Subscription interface {
	// Next blocks until a verdict arrives and returns it. It returns ctx's
	// error when ctx is done first, and any other error when the channel
	// failed.
	Next(ctx context.Context) (Verdict, error)
	// Close ends the subscription. Its error is for the implementation's
	// cleanup; Wait ignores it.
	Close() error
}

// WaitOptions bound Wait.
type WaitOptions struct {
	// Timeout bounds the wait; 0 waits until the request's ExpiresAt,
	// which bounds it in any case. A negative Timeout is refused.
	Timeout time.Duration
	// Now is the clock that stamps decisions and judges expiry (default
	// time.Now). The wait itself is timed by the runtime's timers.
	Now func() time.Time
}

// Wait asks for a decision on req over ch and waits for it, in process. It
// subscribes to the verdict before it publishes the request, so a reviewer
// who answers at once is never missed. A verdict is checked like a stored
// one (see Store.Decide): a verdict that is not a valid human decision on
// req fails with an *Error (ErrInvalidDecision, ErrInvalidArgs) rather than
// being taken for something else.
//
// When nobody answers in time (WaitOptions.Timeout, or req.ExpiresAt),
// Wait returns an Expired decision by ExpiryReviewer and no error: a
// rejection the model sees. It returns a *ChannelError (matching
// ErrChannel) when the channel fails to subscribe, publish or deliver, so
// the caller aborts the turn; ctx's error when ctx ends first; and an
// *Error matching ErrInvalidRequest or ErrInvalidExpiry for a request that
// cannot be decided, and one matching ErrInvalidConfig for a negative
// Timeout. Nothing is recorded: Wait is for flows without a Store.
func Wait(ctx context.Context, ch Channel, id string, req Request, opts WaitOptions) (Decision, error) {
	now := clockOrNow(opts.Now)
	if opts.Timeout < 0 {
		return Decision{}, newError(id, ErrInvalidConfig, "WaitOptions.Timeout is %v (0 waits until the request expires)", opts.Timeout)
	}
	if id == "" {
		return Decision{}, newError(id, ErrInvalidRequest, "empty approval ID")
	}
	if err := req.validate(id); err != nil {
		return Decision{}, err
	}
	item := Item{ID: id, Request: req}
	start := now()
	left := req.ExpiresAt.Sub(start)
	if opts.Timeout > 0 && opts.Timeout < left {
		left = opts.Timeout
	}
	if left <= 0 {
		return expire(item, start, "expired before it could be asked")
	}
	sub, err := ch.Subscribe(ctx, id)
	if err != nil {
		return Decision{}, channelError(ctx, id, "subscribe", err)
	}
	defer sub.Close()
	if err := ch.Publish(ctx, id, req); err != nil {
		return Decision{}, channelError(ctx, id, "publish", err)
	}
	wctx, cancel := context.WithTimeout(ctx, left)
	defer cancel()
	v, err := sub.Next(wctx)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return Decision{}, fmt.Errorf("approval: waiting for approval %s: %w", quoteShort(id), ctx.Err())
	case wctx.Err() != nil:
		return expire(item, now(), fmt.Sprintf("nobody answered within %v; unanswered requests are rejected; escalate instead of retrying", left))
	default:
		return Decision{}, &ChannelError{ID: id, Op: "receive", Err: err}
	}
	if v.Outcome == Expired {
		return Decision{}, newError(id, ErrInvalidDecision, "a reviewer cannot expire a request")
	}
	d, late, derr := decide(item, v, now())
	if derr != nil {
		return Decision{}, derr
	}
	if late != nil {
		return expire(item, d.DecidedAt, "the answer came after the request expired; treated as rejected")
	}
	return d, nil
}

// expire is the decision of a wait that ended unanswered: the wait's own
// bound may come before the request's ExpiresAt.
func expire(item Item, at time.Time, note string) (Decision, error) {
	return Decision{ID: item.ID, Outcome: Expired, Reviewer: ExpiryReviewer, Note: note, ArgsHash: item.Request.ArgsHash, DecidedAt: at.UTC()}, nil
}

// channelError reports a failed subscribe or publish: ctx's error when ctx
// ended, a *ChannelError otherwise.
func channelError(ctx context.Context, id, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("approval: waiting for approval %s: %w", quoteShort(id), ctx.Err())
	}
	return &ChannelError{ID: id, Op: op, Err: err}
}

// ErrChannelClosed is the error a closed MemoryChannel returns.
var ErrChannelClosed = errors.New("approval: channel closed")

// MemoryChannel is a Channel within one process, a minimal publish and
// subscribe bus: verdicts go to the subscriptions open at the time they are
// sent, and are dropped when there are none (like most message buses,
// which is why Wait subscribes first). It is safe for concurrent use. The
// zero value is not usable; call NewMemoryChannel.
type MemoryChannel struct {
	onPublish func(id string, req Request)
	mu        sync.Mutex
	subs      map[string]map[*memSub]bool
	closed    bool
}

// NewMemoryChannel returns a channel that calls onPublish (which may be
// nil) with every published request, on the publisher's goroutine: a
// reviewer UI shows it, and answers with Reply, from there or later.
// onPublish is the application's code: a panic in it fails the Publish
// with a *PanicError (so Wait returns a *ChannelError), and one still
// running when the Publish's context ends is given up on (an error
// matching context's), so that it holds the caller past its deadline no
// longer than a short grace.
func NewMemoryChannel(onPublish func(id string, req Request)) *MemoryChannel {
	return &MemoryChannel{onPublish: onPublish, subs: map[string]map[*memSub]bool{}}
}

type memSub struct {
	c    *MemoryChannel
	id   string
	ch   chan Verdict
	done chan struct{}
	once sync.Once
}

// Subscribe implements Channel. It fails with ErrChannelClosed after
// Close.
func (c *MemoryChannel) Subscribe(ctx context.Context, id string) (Subscription, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrChannelClosed
	}
	s := &memSub{c: c, id: id, ch: make(chan Verdict, 16), done: make(chan struct{})}
	if c.subs[id] == nil {
		c.subs[id] = map[*memSub]bool{}
	}
	c.subs[id][s] = true
	return s, nil
}

// Publish implements Channel. It fails with ErrChannelClosed after Close.
func (c *MemoryChannel) Publish(ctx context.Context, id string, req Request) error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return ErrChannelClosed
	}
	if c.onPublish == nil {
		return nil
	}
	_, p, err := safe.Bound(ctx, nil, "the MemoryChannel's onPublish", func() struct{} {
		c.onPublish(id, req)
		return struct{}{}
	})
	if p != nil {
		return &PanicError{ID: id, In: "the MemoryChannel's onPublish", Value: p.Value, Stack: p.Stack}
	}
	return err
}

// Reply sends a verdict on approval id to its open subscriptions and
// reports how many received it (0: nobody listened, and it is lost). A
// subscription that has 16 verdicts queued drops further ones.
func (c *MemoryChannel) Reply(id string, v Verdict) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for s := range c.subs[id] {
		select {
		case s.ch <- v:
			n++
		default:
		}
	}
	return n
}

// Close shuts the channel: open subscriptions fail with ErrChannelClosed,
// and so do later calls.
func (c *MemoryChannel) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		for _, set := range c.subs {
			for s := range set {
				s.once.Do(func() { close(s.done) })
			}
		}
		c.subs = map[string]map[*memSub]bool{}
	}
	return nil
}

// Next implements Subscription.
func (s *memSub) Next(ctx context.Context) (Verdict, error) {
	select {
	case v := <-s.ch:
		return v, nil
	default:
	}
	select {
	case v := <-s.ch:
		return v, nil
	case <-s.done:
		return Verdict{}, ErrChannelClosed
	case <-ctx.Done():
		return Verdict{}, ctx.Err()
	}
}

// Close implements Subscription.
func (s *memSub) Close() error {
	s.c.mu.Lock()
	delete(s.c.subs[s.id], s)
	if len(s.c.subs[s.id]) == 0 {
		delete(s.c.subs, s.id)
	}
	s.c.mu.Unlock()
	s.once.Do(func() { close(s.done) })
	return nil
}
