package runstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net/http"
	"reflect"
	"sync"
	"time"

	"github.com/lockstepgo/lockstep/graph"
	"github.com/lockstepgo/lockstep/internal/safe"
)

// Defaults of Options.
const (
	DefaultPollInterval  = time.Second
	DefaultKeepAlive     = 15 * time.Second
	DefaultWriteTimeout  = 10 * time.Second
	DefaultMaxClients    = 256
	DefaultMaxReplay     = 1000
	DefaultMaxEventBytes = 1 << 20
	DefaultQueue         = 256
)

// Options configure a Hub. Authorize is required; zero values of the
// others take the defaults above.
type Options struct {
	// Authorize decides whether the request may read the thread's
	// events: state, updates, interrupts and model output, which are the
	// application's data. A non-nil error refuses it with 403 (the
	// error's text is logged, not sent). It is called once per request,
	// contained: a panic in it refuses the request with 500.
	Authorize func(r *http.Request, thread string) error
	// Thread names the thread a request follows. nil reads the path
	// value "thread" (a pattern such as "GET /threads/{thread}/events").
	// It is contained as Authorize is.
	Thread func(r *http.Request) string
	// PollInterval is how often a stream reads the database for what a
	// run in another process saved. A run that this Hub streams wakes its
	// followers at once, whatever the interval.
	PollInterval time.Duration
	// KeepAlive is how long a stream stays silent before it sends an SSE
	// comment, so that proxies keep it open and a vanished client is
	// noticed.
	KeepAlive time.Duration
	// WriteTimeout bounds each write to a client (where the
	// ResponseWriter supports write deadlines), and each encoding of an
	// application value for it: a client that stops reading is
	// disconnected after it.
	WriteTimeout time.Duration
	// MaxClients bounds the streams open at once; more get 503.
	MaxClients int
	// MaxReplay bounds the checkpoints one catch-up reads: a client
	// whose Last-Event-ID is further behind gets 410 (ErrTooFarBehind).
	MaxReplay int
	// MaxEventBytes bounds an event's data. A durable event above it is
	// sent as a stub with the same ID ("truncated": true and its size);
	// a best-effort one is dropped.
	MaxEventBytes int
	// Queue bounds the best-effort events waiting for one slow client;
	// more are dropped for it (the run is never held up by a client).
	Queue int
	// Logger gets the refusals and failures of streams at Warn and Info
	// (nil: slog.Default()). Its records never hold the application's
	// data.
	Logger *slog.Logger
}

// Hub serves the run streams of the threads of one Runnable, and carries
// the live events of the runs it streams (Stream) to the clients that
// follow their threads. It is safe for concurrent use.
type Hub[S any] struct {
	r    *graph.Runnable[S]
	opts Options
	log  *slog.Logger
	ab   safe.Counter

	mu      sync.Mutex
	subs    map[string]map[*follower]struct{}
	clients int
	closed  bool
	done    chan struct{}
}

// ErrNoAuthorize is returned by New when Options.Authorize is nil.
var ErrNoAuthorize = errors.New("runstream: Options.Authorize is required: a run stream carries the thread's state")

// ErrNoSaver is returned by New for a Runnable without a saver: nothing
// of its runs could be replayed.
var ErrNoSaver = errors.New("runstream: the Runnable has no saver; a run stream replays from it")

// New returns a Hub over r. It returns ErrNoAuthorize or ErrNoSaver, or
// an error naming the option for a negative bound.
func New[S any](r *graph.Runnable[S], opts Options) (*Hub[S], error) {
	if opts.Authorize == nil {
		return nil, ErrNoAuthorize
	}
	if r == nil || r.Saver() == nil {
		return nil, ErrNoSaver
	}
	for _, o := range []struct {
		name string
		d    *time.Duration
		def  time.Duration
	}{{"PollInterval", &opts.PollInterval, DefaultPollInterval}, {"KeepAlive", &opts.KeepAlive, DefaultKeepAlive}, {"WriteTimeout", &opts.WriteTimeout, DefaultWriteTimeout}} {
		if *o.d < 0 {
			return nil, fmt.Errorf("runstream: Options.%s is negative (%v)", o.name, *o.d)
		}
		if *o.d == 0 {
			*o.d = o.def
		}
	}
	for _, o := range []struct {
		name string
		n    *int
		def  int
	}{{"MaxClients", &opts.MaxClients, DefaultMaxClients}, {"MaxReplay", &opts.MaxReplay, DefaultMaxReplay},
		{"MaxEventBytes", &opts.MaxEventBytes, DefaultMaxEventBytes}, {"Queue", &opts.Queue, DefaultQueue}} {
		if *o.n < 0 {
			return nil, fmt.Errorf("runstream: Options.%s is negative (%d)", o.name, *o.n)
		}
		if *o.n == 0 {
			*o.n = o.def
		}
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Hub[S]{r: r, opts: opts, log: log, subs: map[string]map[*follower]struct{}{}, done: make(chan struct{})}, nil
}

// Close ends every open stream (each returns at its next wake-up, within
// one PollInterval) and refuses new ones with 503. http.Server.Shutdown
// does not end the requests it waits for: call Close first. Streams of
// runs (Stream) are not affected.
func (h *Hub[S]) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		close(h.done)
	}
}

// Abandoned counts the application's MarshalJSON calls that did not
// return within WriteTimeout (or before their run's context ended) and
// were left running.
func (h *Hub[S]) Abandoned() int64 { return h.ab.Total() }

// Stream runs thread as graph.Runnable.Stream does and yields the same
// events, and sends the run's live events to the clients that follow the
// thread on this Hub: its model output (messages) and custom events as
// they come, and a wake-up after every saved step and at the run's end,
// on which each client reads what was saved from the database. Clients
// never hold the run up: a slow one loses best-effort events, never a
// durable one.
func (h *Hub[S]) Stream(ctx context.Context, thread string, in graph.Input[S], opts ...graph.RunOption) iter.Seq2[graph.Event[S], error] {
	return func(yield func(graph.Event[S], error) bool) {
		defer h.publish(thread, item{wake: true}) // the run's end is saved
		for e, err := range h.r.Stream(ctx, thread, in, opts...) {
			if err == nil {
				h.forward(ctx, thread, e)
			}
			if !yield(e, err) {
				return
			}
		}
	}
}

// Run is Stream for a caller that wants only its outcome: it runs the
// stream to its end and returns its error (nil when the run stopped done
// or waiting; GetState says which).
func (h *Hub[S]) Run(ctx context.Context, thread string, in graph.Input[S], opts ...graph.RunOption) error {
	for _, err := range h.Stream(ctx, thread, in, opts...) {
		if err != nil {
			return err
		}
	}
	return nil
}

// forward hands e to the thread's followers.
func (h *Hub[S]) forward(ctx context.Context, thread string, e graph.Event[S]) {
	switch e.Kind {
	case graph.EventMessages, graph.EventCustom:
		if !h.following(thread) {
			return
		}
		data, ok := h.encode(ctx, e.Data)
		if !ok {
			return
		}
		b, err := json.Marshal(liveData{NS: e.NS, Step: e.Step, Node: e.Node, Task: e.TaskID, Data: data})
		if err != nil || len(b) > h.opts.MaxEventBytes {
			return
		}
		h.publish(thread, item{name: string(e.Kind), data: b})
	case graph.EventValues:
		// Read up to this checkpoint only: the best-effort events queued
		// behind the wake-up came before what the run saved after it.
		if e.NS == "" {
			h.publish(thread, item{wake: true, upto: e.Config.CheckpointID})
		}
	case graph.EventInterrupt:
		if e.NS == "" {
			h.publish(thread, item{wake: true})
		}
	}
}

// encode marshals an application value, contained: a panic is a loss of
// the value, and a MarshalJSON still running when ctx ends (or after
// WriteTimeout) is given up on.
func (h *Hub[S]) encode(ctx context.Context, v any) (json.RawMessage, bool) {
	var (
		b   []byte
		err error
		p   *safe.Panic
		ab  error
	)
	if v == nil || !safe.Foreign(reflect.TypeOf(v)) {
		p = safe.Call(func() { b, err = json.Marshal(v) })
	} else {
		ctx, cancel := context.WithTimeout(ctx, h.opts.WriteTimeout)
		defer cancel()
		type res struct {
			b   []byte
			err error
		}
		var r res
		r, p, ab = safe.Bound(ctx, &h.ab, "the MarshalJSON of a streamed value", func() res {
			b, err := json.Marshal(v)
			return res{b, err}
		})
		b, err = r.b, r.err
	}
	switch {
	case p != nil:
		h.log.Warn("runstream: the MarshalJSON of a streamed value panicked; the value is not sent", "panic", p.String())
		return nil, false
	case ab != nil:
		h.log.Warn("runstream: the MarshalJSON of a streamed value did not return; the value is not sent", "error", ab.Error())
		return nil, false
	case err != nil:
		h.log.Warn("runstream: a streamed value does not encode as JSON; it is not sent", "error", err.Error())
		return nil, false
	}
	return b, true
}

// item is what a run hands a follower: a best-effort event, or a
// wake-up to read the database (up to a checkpoint, or all of it).
type item struct {
	wake bool
	upto string
	name string
	data []byte
}

// follower is one open stream's inbox.
type follower struct {
	mu      sync.Mutex
	items   []item
	max     int
	dropped int
	wakeup  bool // a wake-up was dropped with a full inbox
	signal  chan struct{}
}

func (f *follower) push(it item) {
	f.mu.Lock()
	switch {
	case len(f.items) < f.max:
		if last := len(f.items) - 1; it.wake && last >= 0 && f.items[last].wake {
			// One wake-up reads what both would have.
			if prev := &f.items[last]; prev.upto != "" && (it.upto == "" || it.upto > prev.upto) {
				prev.upto = it.upto
			}
			break
		}
		f.items = append(f.items, it)
	case it.wake:
		f.wakeup = true
	default:
		f.dropped++
	}
	f.mu.Unlock()
	select {
	case f.signal <- struct{}{}:
	default:
	}
}

// take returns what came since the last take.
func (f *follower) take() (items []item, wake bool, dropped int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	items, wake, dropped = f.items, f.wakeup, f.dropped
	f.items, f.wakeup, f.dropped = nil, false, 0
	return items, wake, dropped
}

func (h *Hub[S]) following(thread string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs[thread]) > 0
}

func (h *Hub[S]) publish(thread string, it item) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for f := range h.subs[thread] {
		f.push(it)
	}
}

// join registers a follower of thread; errTooMany or errClosed when it
// cannot.
func (h *Hub[S]) join(thread string) (*follower, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	if h.clients >= h.opts.MaxClients {
		return nil, ErrTooManyClients
	}
	f := &follower{max: h.opts.Queue, signal: make(chan struct{}, 1)}
	if h.subs[thread] == nil {
		h.subs[thread] = map[*follower]struct{}{}
	}
	h.subs[thread][f] = struct{}{}
	h.clients++
	return f, nil
}

func (h *Hub[S]) leave(thread string, f *follower) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs[thread], f)
	if len(h.subs[thread]) == 0 {
		delete(h.subs, thread)
	}
	h.clients--
}
