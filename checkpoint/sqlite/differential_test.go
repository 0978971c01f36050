package sqlite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/lockstepgo/lockstep/checkpoint"
)

// fakeClock is a settable clock shared by the savers of a test.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// errClass reduces an error to what the contract specifies about it.
func errClass(err error) string {
	var ce *checkpoint.ConflictError
	var be *checkpoint.BusyError
	var co *checkpoint.CorruptError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &ce):
		return fmt.Sprintf("conflict{%s %s expected=%s head=%s}", ce.Thread, ce.NS, ce.Expected, ce.Head)
	case errors.As(err, &be):
		return fmt.Sprintf("busy{%s %s %s %d}", be.Thread, be.NS, be.Owner, be.Until.UnixNano())
	case errors.As(err, &co):
		return fmt.Sprintf("corrupt{%s %s %s}", co.Thread, co.Checkpoint, co.What)
	case errors.Is(err, checkpoint.ErrNotFound):
		return "notfound"
	case errors.Is(err, checkpoint.ErrInvalid):
		return "invalid"
	}
	return "other: " + err.Error()
}

// TestDifferentialAgainstMemory drives MemorySaver (the reference
// implementation of the contract) and the SQLite saver with the same
// seeded random operations (puts with append chains, forks, leases,
// pending writes with special channels, claims, releases, deletes, prunes,
// clock jumps) and requires identical results from every read: Get (with
// and without Have), List with filters, Threads and PendingInterrupts
// pages. Set LOCKSTEP_SEED to replay a seed.
func TestDifferentialAgainstMemory(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	ops := 400
	if raceEnabled {
		seeds, ops = seeds[:2], 150
	}
	if os.Getenv("LOCKSTEP_LONG") != "" {
		for i := uint64(9); i < 64; i++ {
			seeds = append(seeds, i)
		}
		ops = 1500
	}
	if s := os.Getenv("LOCKSTEP_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seeds = []uint64{n}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			runDifferential(t, seed, ops)
		})
	}
}

type diffModel struct {
	t     *testing.T
	rng   *rand.Rand
	clock *fakeClock
	ids   *checkpoint.IDGenerator
	mem   *checkpoint.MemorySaver
	sql   *Saver
	ctx   context.Context
	// liveness: what actually happened, so that a run where everything
	// fails cannot pass
	putsOK, putsTried, getsOK, interruptsSeen int
}

var (
	diffThreads  = []string{"t1", "t2", "t3"}
	diffNS       = []string{"", "child:1"}
	diffOwners   = []string{"runner-a", "runner-b"}
	diffChannels = []string{"Log", "N", "branch:to:x", "Msgs"}
	diffWriteCh  = []string{"N", "Log", checkpoint.ChannelError, checkpoint.ChannelInterrupt, checkpoint.ChannelResume,
		checkpoint.ChannelBreakpoint, checkpoint.ChannelStepPrefix + "0", "__steps__:x"}
)

func runDifferential(t *testing.T, seed uint64, ops int) {
	t.Logf("seed %d (LOCKSTEP_SEED=%d replays it)", seed, seed)
	clock := newFakeClock()
	m := &diffModel{
		t: t, rng: rand.New(rand.NewPCG(seed, 0xd1ff)), clock: clock,
		ids: checkpoint.NewIDGenerator(clock.Now, rand.NewChaCha8([32]byte{byte(seed), 7})),
		mem: checkpoint.NewMemorySaver(clock.Now),
		sql: openTemp(t, Config{Synchronous: SyncNormal, Now: clock.Now}),
		ctx: t.Context(),
	}
	for i := 0; i < ops; i++ {
		m.step(i)
		if t.Failed() {
			t.Fatalf("stopped at op %d (seed %d)", i, seed)
		}
	}
	for _, th := range diffThreads {
		m.compareList(th, checkpoint.ListOptions{AllNamespaces: true})
	}
	t.Logf("puts %d/%d ok, %d gets compared, %d pending interrupts compared", m.putsOK, m.putsTried, m.getsOK, m.interruptsSeen)
	if m.putsOK*4 < m.putsTried || m.getsOK < ops/20 {
		t.Errorf("liveness: only %d of %d puts and %d gets succeeded", m.putsOK, m.putsTried, m.getsOK)
	}
}

func (m *diffModel) pick(xs []string) string { return xs[m.rng.IntN(len(xs))] }

func (m *diffModel) same(what string, a, b error) bool {
	m.t.Helper()
	if ca, cb := errClass(a), errClass(b); ca != cb {
		m.t.Errorf("%s: memory %s, sqlite %s", what, ca, cb)
		return false
	}
	return true
}

func (m *diffModel) value() json.RawMessage {
	switch m.rng.IntN(4) {
	case 0:
		return json.RawMessage(strconv.Itoa(m.rng.IntN(100)))
	case 1:
		return json.RawMessage(`{"k":"` + strconv.Itoa(m.rng.IntN(10)) + `","nested":[1,2,{"x":null}]}`)
	case 2:
		return json.RawMessage(`"s` + strconv.Itoa(m.rng.IntN(10)) + `"`)
	}
	return json.RawMessage(`null`)
}

func (m *diffModel) tasks() []checkpoint.TaskWrites {
	n := m.rng.IntN(3)
	var out []checkpoint.TaskWrites
	for i := 0; i < n; i++ {
		tw := checkpoint.TaskWrites{TaskID: fmt.Sprintf("task-%d", m.rng.IntN(3)), Node: m.pick([]string{"a", "b"}), Path: "pull"}
		if m.rng.IntN(6) == 0 {
			tw.TaskID = checkpoint.CommandTaskID(1 + m.rng.IntN(2))
		}
		for j := m.rng.IntN(3); j >= 0; j-- {
			ch := m.pick(diffWriteCh)
			v := m.value()
			// Special writes hold what the runtime writes (the savers
			// refuse anything else alike: see the validation suite);
			// interrupt IDs, unique within a checkpoint, name their task.
			switch ch {
			case checkpoint.ChannelInterrupt:
				v = json.RawMessage(fmt.Sprintf(`[{"id":"%s-i%d","value":%s},{"id":"%[1]s-j%d","value":1}]`, tw.TaskID, m.rng.IntN(4), m.value(), m.rng.IntN(2)))
			case checkpoint.ChannelResume:
				v = json.RawMessage(fmt.Sprintf(`{"%s-i%d":"yes"}`, tw.TaskID, m.rng.IntN(4)))
			case checkpoint.ChannelError:
				v = json.RawMessage(fmt.Sprintf(`{"node":"a","message":%s}`, strconv.Quote(string(m.value()))))
			case checkpoint.ChannelBreakpoint:
				v = json.RawMessage(`{"when":"before","nodes":["a"]}`)
			case checkpoint.ChannelStepPrefix + "0":
				v = json.RawMessage(fmt.Sprintf(`{"name":"s","result":%s}`, m.value()))
			}
			tw.Writes = append(tw.Writes, checkpoint.Write{Channel: ch, Value: v})
		}
		out = append(out, tw)
	}
	return out
}

func (m *diffModel) step(i int) {
	th, ns := m.pick(diffThreads), m.pick(diffNS)
	owner := m.pick(diffOwners)
	lease := checkpoint.Lease{Owner: owner, TTL: time.Duration(1+m.rng.IntN(5)) * time.Second}
	head, _ := m.mem.Get(m.ctx, checkpoint.Ref{Thread: th, NS: ns}, checkpoint.GetOptions{})
	switch r := m.rng.IntN(100); {
	case r < 35: // Put
		parent := ""
		versions := map[string]string{}
		fork := false
		if head != nil {
			parent = head.Checkpoint.ID
			versions = head.Checkpoint.Versions
			if m.rng.IntN(8) == 0 { // fork from an older checkpoint
				all, _ := m.mem.List(m.ctx, th, checkpoint.ListOptions{NS: ns})
				if len(all) > 0 {
					old := all[m.rng.IntN(len(all))]
					parent, versions, fork = old.Checkpoint.ID, old.Checkpoint.Versions, true
				}
			}
			if m.rng.IntN(15) == 0 { // stale parent
				parent = m.ids.Next("")
			}
		}
		id := m.ids.Next(parent)
		cp := checkpoint.Checkpoint{
			ID: id, ParentID: parent, CreatedAt: m.clock.Now(),
			Metadata: checkpoint.Metadata{Source: checkpoint.SourceLoop, Step: i, Parents: map[string]string{}, RunID: owner},
			Versions: map[string]string{}, Channels: map[string][]checkpoint.Blob{},
			Mark: parent,
		}
		if m.rng.IntN(20) == 0 { // a step that does not follow the parent's: refused alike
			cp.Metadata.Step = -1
		}
		if m.rng.IntN(3) == 0 {
			cp.Metadata.Extra = map[string]any{"kind": m.pick([]string{"x", "y"}), "n": float64(m.rng.IntN(3)), "flag": m.rng.IntN(2) == 0}
		}
		for ch, v := range versions {
			if m.rng.IntN(8) > 0 {
				cp.Versions[ch] = v
			}
		}
		for _, ch := range diffChannels {
			if m.rng.IntN(3) > 0 {
				continue
			}
			b := checkpoint.Blob{Version: id, Data: m.value()}
			if ch == "Log" || ch == "Msgs" {
				if m.rng.IntN(5) > 0 {
					b.Append, b.Base = true, cp.Versions[ch]
					b.Data = json.RawMessage(fmt.Sprintf(`["item %d"]`, i))
				} else {
					b.Data = json.RawMessage(fmt.Sprintf(`["full %d"]`, i))
				}
			}
			cp.Versions[ch] = id
			cp.Channels[ch] = []checkpoint.Blob{b}
		}
		req := checkpoint.PutRequest{Thread: th, NS: ns, Checkpoint: cp, ParentWrites: m.tasks(), Writes: m.tasks(),
			Fork: fork, Lease: lease, Release: m.rng.IntN(3) == 0}
		err := m.mem.Put(m.ctx, req)
		m.same("put", err, m.sql.Put(m.ctx, req))
		m.putsTried++
		if err == nil {
			m.putsOK++
		}
	case r < 50: // PutWrites
		ref := checkpoint.Ref{Thread: th, NS: ns}
		if head != nil {
			ref.ID = head.Checkpoint.ID
		}
		if m.rng.IntN(10) == 0 || ref.ID == "" {
			ref.ID = m.ids.Next("")
		}
		req := checkpoint.WritesRequest{Ref: ref, Tasks: m.tasks(), Lease: lease, Release: m.rng.IntN(4) == 0}
		m.same("put writes", m.mem.PutWrites(m.ctx, req), m.sql.PutWrites(m.ctx, req))
	case r < 56: // Claim
		ref := checkpoint.Ref{Thread: th, NS: ns}
		if head != nil && m.rng.IntN(6) > 0 {
			ref.ID = head.Checkpoint.ID
		}
		if m.rng.IntN(10) == 0 {
			lease.Owner = ""
		}
		m.same("claim", m.mem.Claim(m.ctx, ref, lease), m.sql.Claim(m.ctx, ref, lease))
	case r < 61: // Release
		m.same("release", m.mem.Release(m.ctx, th, ns, owner), m.sql.Release(m.ctx, th, ns, owner))
	case r < 63: // DeleteThread
		m.same("delete", m.mem.DeleteThread(m.ctx, th), m.sql.DeleteThread(m.ctx, th))
	case r < 66: // Prune
		keep := 1 + m.rng.IntN(4)
		if head == nil {
			// MemorySaver.Prune panics on a thread that was claimed but has
			// no checkpoint (memory.go: kept[""] has no checkpoint); the
			// SQLite saver deletes nothing there.
			if n, err := m.sql.Prune(m.ctx, th, ns, keep); n != 0 || err != nil {
				m.t.Errorf("prune of a thread without checkpoints: %d, %v", n, err)
			}
			return
		}
		a, errA := m.mem.Prune(m.ctx, th, ns, keep)
		b, errB := m.sql.Prune(m.ctx, th, ns, keep)
		if m.same("prune", errA, errB) && a != b {
			m.t.Errorf("prune %s/%q keep %d: memory deleted %d, sqlite %d", th, ns, keep, a, b)
		}
	case r < 72: // clock
		m.clock.Advance(time.Duration(m.rng.IntN(4000)) * time.Millisecond)
	case r < 85: // Get
		ref := checkpoint.Ref{Thread: th, NS: ns}
		var opts checkpoint.GetOptions
		if head != nil && m.rng.IntN(2) == 0 {
			all, _ := m.mem.List(m.ctx, th, checkpoint.ListOptions{NS: ns})
			ref.ID = all[m.rng.IntN(len(all))].Checkpoint.ID
		}
		if head != nil && m.rng.IntN(2) == 0 {
			// Have: what an older checkpoint held
			all, _ := m.mem.List(m.ctx, th, checkpoint.ListOptions{NS: ns})
			opts.Have = all[m.rng.IntN(len(all))].Checkpoint.Versions
		}
		a, errA := m.mem.Get(m.ctx, ref, opts)
		b, errB := m.sql.Get(m.ctx, ref, opts)
		if m.same("get", errA, errB) && errA == nil {
			m.getsOK++
			if d := cmp.Diff(a, b); d != "" {
				m.t.Errorf("get %+v have=%v (-memory +sqlite):\n%s", ref, opts.Have, d)
			}
		}
	case r < 93: // List
		opts := checkpoint.ListOptions{NS: ns, AllNamespaces: m.rng.IntN(4) == 0, Limit: m.rng.IntN(4)}
		if m.rng.IntN(3) == 0 {
			opts.Before = m.ids.Next("")
			if head != nil && m.rng.IntN(2) == 0 {
				opts.Before = head.Checkpoint.ID
			}
		}
		switch m.rng.IntN(8) {
		case 0:
			opts.Filter = map[string]any{"source": "loop"}
		case 1:
			opts.Filter = map[string]any{"kind": "x", "n": 1}
		case 2:
			opts.Filter = map[string]any{"flag": true}
		case 3:
			opts.Filter = map[string]any{"run_id": owner, "step": float64(m.rng.IntN(50))}
		case 4:
			opts.Filter = map[string]any{"parents": map[string]string{}, "missing": nil}
		case 5:
			opts.Filter = map[string]any{"n": "1"} // a string never equals a number
		}
		m.compareList(th, opts)
	case r < 96:
		m.compareThreads()
	default:
		m.compareInterrupts(1 + m.rng.IntN(3))
	}
}

func (m *diffModel) compareThreads() {
	for _, p := range [][2]int{{0, 0}, {1, 1}, {0, 2}, {5, 0}} {
		a, errA := m.mem.Threads(m.ctx, p[0], p[1])
		b, errB := m.sql.Threads(m.ctx, p[0], p[1])
		if m.same("threads", errA, errB) {
			if d := cmp.Diff(a, b, cmpopts.EquateEmpty()); d != "" {
				m.t.Errorf("threads offset %d limit %d (-memory +sqlite):\n%s", p[0], p[1], d)
			}
		}
	}
}

func (m *diffModel) compareList(th string, opts checkpoint.ListOptions) {
	m.t.Helper()
	a, errA := m.mem.List(m.ctx, th, opts)
	b, errB := m.sql.List(m.ctx, th, opts)
	if m.same("list", errA, errB) && errA == nil {
		if d := cmp.Diff(a, b); d != "" {
			m.t.Errorf("list %s %+v (-memory +sqlite):\n%s", th, opts, d)
		}
	}
}

func (m *diffModel) compareInterrupts(limit int) {
	page := func(s checkpoint.InterruptLister) ([]checkpoint.PendingInterrupt, []int, error) {
		var all []checkpoint.PendingInterrupt
		var sizes []int
		after := ""
		for range 100 {
			got, next, err := s.PendingInterrupts(m.ctx, checkpoint.InterruptQuery{After: after, Limit: limit})
			if err != nil {
				return nil, nil, err
			}
			all = append(all, got...)
			sizes = append(sizes, len(got))
			if next == "" {
				return all, sizes, nil
			}
			after = next
		}
		return nil, nil, errors.New("cursor never ended")
	}
	a, sa, errA := page(m.mem)
	m.interruptsSeen += len(a)
	b, sb, errB := page(m.sql)
	if m.same("pending interrupts", errA, errB) {
		if d := cmp.Diff(a, b, cmpopts.EquateEmpty()); d != "" {
			m.t.Errorf("pending interrupts limit %d (-memory +sqlite):\n%s", limit, d)
		}
		if !slices.Equal(sa, sb) {
			m.t.Errorf("pending interrupts limit %d: page sizes memory %v, sqlite %v", limit, sa, sb)
		}
	}
}
